#!/usr/bin/env bash
# `make dev-multicluster`: two local control planes, a manager and a
# worker, each with its own `sluice dev`; the worker's NATS joins the
# manager's as a leaf node. A Job created on the manager runs on the
# worker's nodes, and its status shows on the manager.
set -euo pipefail
cd "$(dirname "$0")/.."

manager="${DEVCLUSTER_DIR:-$HOME/.sluice-devcluster}"
worker="${DEVCLUSTER_WORKER_DIR:-$HOME/.sluice-devcluster-worker}"
# The worker's leaf node password: made once, kept with the manager.
secret="$manager/worker1.password"

up() { # dir
	bin/devcluster up --dir "$1"
	bin/devcluster kubectl --dir "$1" apply -f config/crd/ >/dev/null
	bin/devcluster kubectl --dir "$1" wait --for condition=established --timeout=60s crd --all >/dev/null
}
running() { [ -f "$1/sluice.pid" ] && kill -0 "$(cat "$1/sluice.pid")" 2>/dev/null; }

up "$manager"
up "$worker"
mkdir -p "$manager"
[ -f "$secret" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$secret"
password="$(cat "$secret")"

bin/devcluster kubectl --dir "$manager" apply -f examples/multicluster/manager.yaml
bin/devcluster kubectl --dir "$worker" apply -f examples/multicluster/worker.yaml

# The manager accepts worker1's leaf node on port 7422; the worker's own
# ports are moved aside so both run on one machine.
if running "$manager" && ! (exec 3<>/dev/tcp/127.0.0.1/7422) 2>/dev/null; then
	# A `make dev` one, which takes no leaf nodes: start it again as a manager.
	echo "restarting the sluice dev of $manager to accept the worker's leaf node"
	kill "$(cat "$manager/sluice.pid")"
	while running "$manager"; do sleep 0.2; done
fi
if running "$manager"; then
	echo "manager's sluice dev already runs (pid $(cat "$manager/sluice.pid"))"
else
	KUBECONFIG="$manager/kubeconfig" nohup bin/sluice dev --nats-store "$manager/jetstream" \
		--leaf-port 7422 --leaf-worker "worker1=$password" >"$manager/sluice.log" 2>&1 &
	echo $! >"$manager/sluice.pid"
	echo "manager's sluice dev started (pid $!), log in $manager/sluice.log"
fi
if running "$worker"; then
	echo "worker's sluice dev already runs (pid $(cat "$worker/sluice.pid"))"
else
	KUBECONFIG="$worker/kubeconfig" nohup bin/sluice dev --nats-store "$worker/jetstream" \
		--nats-port 4223 --http-address 127.0.0.1:8091 --webhook-address 127.0.0.1:9444 \
		--leaf-remote "nats-leaf://worker1:$password@127.0.0.1:7422" >"$worker/sluice.log" 2>&1 &
	echo $! >"$worker/sluice.pid"
	echo "worker's sluice dev started (pid $!), log in $worker/sluice.log"
fi

# Both answer once their webhooks do and their services are ready.
for url in http://127.0.0.1:8090/readyz http://127.0.0.1:8091/readyz; do
	for i in $(seq 1 120); do
		curl -sf "$url" >/dev/null 2>&1 && break
		if [ "$i" = 120 ]; then
			echo "$url did not answer ready within 60 s; see the sluice logs" >&2
			exit 1
		fi
		sleep 0.5
	done
done
bin/devcluster kubectl --dir "$manager" delete --ignore-not-found --wait -f examples/multicluster/job.yaml >/dev/null
for i in $(seq 1 120); do
	bin/devcluster kubectl --dir "$manager" create --dry-run=server -f examples/multicluster/job.yaml >/dev/null 2>&1 && break
	sleep 0.5
done
bin/devcluster kubectl --dir "$manager" apply -f examples/multicluster/job.yaml

cat <<MSG

A Job was created on the manager. Watch it run on the worker:

  bin/devcluster kubectl --dir $worker get jobs,pods -n team-a -o wide   # the copy, on the worker's nodes
  bin/devcluster kubectl --dir $manager get jobs -n team-a -w            # the manager's, suspended, its status mirrored
  bin/sluice events tail --all                                           # check updated: Ready, cluster worker1

Stop both with: make dev-down-multicluster
MSG
