#!/usr/bin/env bash
# `make dev-helm`: Sluice installed as users install it. A local control
# plane with a real node (kubelet, containerd and runc from Debian's
# packages), Sluice's images built without Docker and imported into the
# node, `helm install` of charts/sluice (NATS inside the release, each
# service its own user over TLS), the example queues, and example Jobs to
# watch. Needs root, for the node. Stop it with: make dev-down.
set -euo pipefail
cd "$(dirname "$0")/.."

state="${DEVCLUSTER_DIR:-$HOME/.sluice-devcluster}"
helm="$(hack/helm.sh)"
bin/devcluster up --real-node --images bin/images --dir "$state"
export KUBECONFIG="$state/kubeconfig"
kubectl() { bin/devcluster kubectl --dir "$state" "$@"; }

if "$helm" status sluice -n sluice-system >/dev/null 2>&1; then
	"$helm" upgrade sluice charts/sluice -n sluice-system --reuse-values --wait --timeout 8m
else
	"$helm" install sluice charts/sluice -n sluice-system --create-namespace \
		-f charts/examples/devcluster.yaml --wait --timeout 8m
fi
kubectl -n sluice-system get pods -o wide

kubectl apply -f examples/cluster/queues.yaml
kubectl delete --ignore-not-found --wait -f examples/cluster/jobs.yaml -f examples/cluster/jobs-later.yaml >/dev/null
kubectl apply -f examples/cluster/jobs.yaml
sleep 15
kubectl apply -f examples/cluster/jobs-later.yaml

dc="bin/devcluster kubectl"
if [ -n "${DEVCLUSTER_DIR:-}" ]; then
	dc="bin/devcluster kubectl --dir $state"
fi
cat <<MSG

Sluice runs in the cluster (namespace sluice-system). Look at it with:

  export KUBECONFIG=$state/kubeconfig
  $dc get jobs -A -w          # team-a/sweep is preempted by team-b/train
  $dc get events -n team-b    # Admitted / Pending (with the reason) / Preempted
  $dc -n sluice-system logs deploy/sluice-admission

and its events, as the chart's notes say:

  $dc -n sluice-system port-forward svc/sluice-nats 4222 &
  $dc -n sluice-system get secret sluice-nats-tls -o jsonpath='{.data.ca\.crt}' | base64 -d > nats-ca.crt
  export SLUICE_NATS_PASSWORD=\$($dc -n sluice-system get secret sluice-nats-users -o jsonpath='{.data.reader}' | base64 -d)
  bin/sluice events tail --all --nats tls://localhost:4222 --nats-ca nats-ca.crt --nats-user reader

Stop everything with: make dev-down
MSG
