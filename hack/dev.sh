#!/usr/bin/env bash
# `make dev`: a local control plane, Sluice's CRDs and example queues,
# `sluice dev` in the background, and example Jobs to watch.
set -euo pipefail
cd "$(dirname "$0")/.."

state="${DEVCLUSTER_DIR:-$HOME/.sluice-devcluster}"
# DEVCLUSTER_TOPOLOGY=1: also the data center of 32 GPU nodes in blocks and
# racks, and the topology-aware queue of examples/cluster/topology.yaml.
topology=()
if [ -n "${DEVCLUSTER_TOPOLOGY:-}" ]; then topology=(--topology); fi
bin/devcluster up --dir "$state" "${topology[@]}"
export KUBECONFIG="$state/kubeconfig"
kubectl() { bin/devcluster kubectl --dir "$state" "$@"; }

kubectl apply -f config/crd/ >/dev/null
# The job kinds' CRDs (JobSet, RayJob, RayCluster, RayService, MPIJob, AppWrapper,
# LeaderWorkerSet, TrainJob and its runtimes, and the training operator's
# PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob) from the upstream
# modules; server-side, as they are too large for the
# last-applied annotation.
kinds="$state/kind-crds"
go run ./hack/kindcrds "$kinds" >/dev/null
kubectl apply --server-side -f "$kinds" >/dev/null
# A CRD just applied may have no status yet, which kubectl wait takes for
# an error: ask again until all are established (60 s at most).
for i in $(seq 1 60); do
	if kubectl wait --for condition=established --timeout=60s crd --all >/dev/null 2>&1; then
		break
	fi
	if [ "$i" = 60 ]; then
		kubectl wait --for condition=established --timeout=1s crd --all >/dev/null
	fi
	sleep 1
done
# Kubeflow Trainer's own ClusterTrainingRuntimes (torch-distributed,
# mpi-distributed, …), which TrainJobs name, from the module go.mod pins.
trainer="$(go list -m -f '{{.Dir}}' github.com/kubeflow/trainer/v2)"
for f in "$trainer"/manifests/base/runtimes/*.yaml; do
	case "$f" in */kustomization.yaml) continue ;; esac
	kubectl apply --server-side -f "$f" >/dev/null
done
kubectl apply -f examples/cluster/queues.yaml
if [ -n "${DEVCLUSTER_TOPOLOGY:-}" ]; then kubectl apply -f examples/cluster/topology.yaml; fi

if [ -f "$state/sluice.pid" ] && kill -0 "$(cat "$state/sluice.pid")" 2>/dev/null; then
	echo "sluice dev already runs (pid $(cat "$state/sluice.pid"))"
	if [ -n "${SLUICE_DEV_ARGS:-}" ]; then
		echo "SLUICE_DEV_ARGS not applied to the running sluice dev: run make dev-down first" >&2
	fi
else
	# SLUICE_DEV_ARGS: more flags for sluice dev (e.g. --kueue-labels,
	# --config FILE), split on spaces.
	# shellcheck disable=SC2086
	# --visibility-apiservice: the API server serves the visibility API
	# (kubectl get workloads, the pending API) from this sluice dev.
	nohup bin/sluice dev --nats-store "$state/jetstream" --visibility-apiservice --visibility-cert-dir "$state/visibility-cert" \
		${SLUICE_DEV_ARGS:-} >"$state/sluice.log" 2>&1 &
	echo $! >"$state/sluice.pid"
	echo "sluice dev started (pid $(cat "$state/sluice.pid")), log in $state/sluice.log"
fi

# The story plays again on each run: the example Jobs of a previous run go
# first.
kubectl delete --ignore-not-found --wait -f examples/cluster/jobs.yaml -f examples/cluster/jobs-later.yaml >/dev/null
# A server-side dry run of the Jobs goes through Sluice's webhook: they
# come back suspended once this process's webhook answers (a configuration
# left by an earlier run may point at it before it listens; on a new
# cluster there is none until sluice dev writes it).
for i in $(seq 1 120); do
	suspended="$(kubectl create --dry-run=server -f examples/cluster/jobs.yaml -o jsonpath='{.spec.suspend}{" "}' 2>/dev/null || true)"
	if [[ "$suspended" == *true* && "$suspended" != *false* ]]; then
		break
	fi
	if ! kill -0 "$(cat "$state/sluice.pid")" 2>/dev/null; then
		# It refused its flags or configuration: say why, not that the
		# webhook is slow.
		echo "sluice dev stopped; the end of $state/sluice.log:" >&2
		tail -n 5 "$state/sluice.log" >&2
		rm -f "$state/sluice.pid"
		exit 1
	fi
	if [ "$i" = 120 ]; then
		echo "Sluice's webhook did not answer within 60 s; see $state/sluice.log" >&2
		exit 1
	fi
	sleep 0.5
done
kubectl apply -f examples/cluster/jobs.yaml
sleep 15
kubectl apply -f examples/cluster/jobs-later.yaml

# The devcluster's kubectl finds a cluster in another directory by --dir.
dc="bin/devcluster kubectl"
if [ -n "${DEVCLUSTER_DIR:-}" ]; then
	dc="bin/devcluster kubectl --dir $state"
fi
cat <<MSG

Sluice is running. Open its live view at http://127.0.0.1:8090/ or look at it with:

  export KUBECONFIG=$state/kubeconfig
  $dc get jobs -A -w          # team-a/sweep is preempted by team-b/train
  $dc get events -n team-b    # Admitted / Pending (with the reason) / Preempted
  bin/sluice events tail --all                   # every decision as a CloudEvent, from the start
  bin/sluice queues                              # usage, pending and admitted per queue
  bin/sluice pending --cluster-queue team-a      # who waits, in which order, and why
  $dc get workloads -A        # every job Sluice manages: queue, state, flavor, place, reason

Stop everything with: make dev-down
MSG
