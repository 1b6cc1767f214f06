# Sluice build, test and code generation.
#
# Tools are run with `go run pkg@version`, so nothing needs installing and the
# versions below are the only place they are pinned.

# controller-gen v0.19 is built against k8s.io 0.34, the version the API uses.
CONTROLLER_GEN_VERSION ?= v0.19.0
CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

# Directories that hold generated files; `verify` fails if they are stale.
GENERATED_DIRS := api config charts/sluice/crds charts/sluice/templates/_kinds.tpl docs/integrations.md

.PHONY: all build test test-unit fuzz e2e loadtest natscluster generate verify bench dev dev-down devcluster dev-multicluster dev-down-multicluster images dev-helm

all: build

build:
	go build -o bin/sluice ./cmd/sluice

# Container images without Docker or a registry (docs/deploy.md): sluice,
# nats-server, the pause image and the tests' workload image, as tarballs in
# bin/images for `ctr images import`. The sluice image's tag is the chart's
# appVersion, the one the chart pulls by default.
APP_VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*/\1/p' charts/sluice/Chart.yaml)
images:
	go run ./hack/images -out bin/images -sluice-tag $(APP_VERSION)

devcluster:
	cd hack/devcluster && go build -o ../../bin/devcluster .

# Everything: unit and integration tests (real JetStream, the API server's
# own CRD validation), the devcluster's own tests, the fuzz targets, and the
# end-to-end tests on a real control plane (the first run builds Kubernetes:
# ~10 minutes).
test: test-unit fuzz e2e

# The chart's tests render it with helm, built once from its Go module.
test-unit:
	SLUICE_HELM="$$(hack/helm.sh)" go test ./...
	cd hack/devcluster && go test ./...

# Each fuzz target runs a fixed number of inputs, about 10 s each here (no
# panic, every bad input refused with a message). A duration (-fuzztime 10s)
# races Go 1.26's fuzz coordinator, which then fails a target with "context
# deadline exceeded" and no failing input (go.dev/issue/75804, fixed in Go
# 1.27); a count has no deadline to race. FUZZTIME (a count such as 100000x,
# or a duration) replaces every target's budget. Minimizing a new input is
# capped: Go's default of 60 s per input would take all the time on inputs
# of a few KB.
FUZZTIME ?=
FUZZ_TARGETS := events:FuzzDecode:25000 internal/engine:FuzzEngineArithmetic:20000 internal/simulate:FuzzLoad:10000 internal/queueconfig:FuzzToEngine:40000 internal/convert:FuzzConvert:20000 internal/ledger:FuzzParseEntry:20000 services/integration/job:FuzzWebhookReview:8000 services/integration/kinds:FuzzEveryKindsWebhook:20000 internal/fence:FuzzFenceValue:20000 services/multicluster:FuzzWorkerMessage:20000 services/multicluster:FuzzReport:20000
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget="$(FUZZTIME)"; \
		[ -n "$$budget" ] || budget="$${rest#*:}x"; \
		echo "fuzz $$name ($$pkg, $$budget)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$budget -fuzzminimizetime 200x ./$$pkg/ || exit 1; \
	done

# The suite took 25 minutes on a fast day and 38 on a slow one (stop 62);
# 60 leaves room under CI's 90 with the unit and fuzz tests' 22.
e2e:
	SLUICE_HELM="$$(hack/helm.sh)" SLUICE_E2E=1 go test -count=1 -timeout 60m ./test/e2e/

# Kueue's baseline workload at full scale (15,000 Jobs) through the local
# control plane, once through `sluice dev` and once with every service its
# own process and one killed every few seconds; the quota checker and the
# event-order audit must find nothing. LOADTEST_SCALE=0.3 for 4,500 Jobs.
# PROFILE=large-scale replays Kueue's 1,000-queue configuration (50,000
# Jobs) through `sluice dev` instead, PROFILE=tas its topology-aware one,
# PROFILE=path/to/generator.yaml any Kueue generator file. REPLICAS=N
# replays the profile through services in processes of their own with N
# admission replicas sharing the cohort trees, one SIGKILLed mid-run.
LOADTEST_SCALE ?= 1
PROFILE ?= baseline
REPLICAS ?=
LOADTEST_TESTS = $(if $(REPLICAS),TestAdmissionReplicasAtScale,$(if $(filter baseline,$(PROFILE)),TestBaseline,TestBaselineQuotaHolds$$))
loadtest:
	SLUICE_E2E=1 SLUICE_BASELINE_SCALE=$(LOADTEST_SCALE) SLUICE_BASELINE_PROFILE=$(PROFILE) SLUICE_ADMISSION_REPLICAS=$(REPLICAS) SLUICE_E2E_LOG_LEVEL=info go test -count=1 -timeout 120m -v -run '$(LOADTEST_TESTS)' ./test/e2e/

# The services on a three-node JetStream cluster whose event-stream leader
# is shut down under load (test/natscluster, also part of test-unit), five
# times in a row.
natscluster:
	go test -count=5 -v -timeout 15m -run TestThreeNode ./test/natscluster/

# A local cluster with Sluice running and example Jobs to watch.
dev: build devcluster
	hack/dev.sh

dev-down:
	-@state="$${DEVCLUSTER_DIR:-$$HOME/.sluice-devcluster}"; \
	if [ -f "$$state/sluice.pid" ]; then kill "$$(cat "$$state/sluice.pid")" 2>/dev/null; rm -f "$$state/sluice.pid"; fi
	-bin/devcluster down

# The same story with Sluice installed by helm on a devcluster with a real
# node (docs/devcluster.md; needs root): images, helm install, example Jobs.
dev-helm: build devcluster images
	hack/dev-helm.sh

# Two local clusters: a manager whose Jobs run on a worker cluster, the
# worker's NATS a leaf node of the manager's (docs/multicluster.md).
dev-multicluster: build devcluster
	hack/dev-multicluster.sh

dev-down-multicluster: dev-down
	-@state="$${DEVCLUSTER_WORKER_DIR:-$$HOME/.sluice-devcluster-worker}"; \
	if [ -f "$$state/sluice.pid" ]; then kill "$$(cat "$$state/sluice.pid")" 2>/dev/null; rm -f "$$state/sluice.pid"; fi; \
	bin/devcluster down --dir "$$state"

# Deep-copy methods (api/v1beta1/zz_generated.deepcopy.go) and one CRD
# manifest per kind in config/crd/, copied into the Helm chart's crds/; the
# chart's table of job kinds and the docs' from the registered adapters.
generate:
	$(CONTROLLER_GEN) object paths=./api/... \
		crd paths=./api/... output:crd:artifacts:config=config/crd
	rm -f charts/sluice/crds/*.yaml && cp config/crd/*.yaml charts/sluice/crds/
	go run ./hack/kindgen

# Formatting, vet, the docs check (every `sluice …` command and flag and
# every `make` target the README and docs/ name exists), and generated
# files up to date with the API types: a regeneration must change no
# tracked file and add no untracked one.
verify: generate
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt needed on:"; echo "$$unformatted"; exit 1; \
	fi
	go vet ./...
	go test -count=1 -run '^TestDocs' ./cmd/sluice/
	@git diff --exit-code -- $(GENERATED_DIRS) || \
		{ echo "api/ or config/ changed after 'make generate': commit the types with the regenerated files"; exit 1; }
	@untracked="$$(git ls-files --others --exclude-standard -- $(GENERATED_DIRS))"; \
	if [ -n "$$untracked" ]; then \
		echo "untracked files (generated files must be committed):"; echo "$$untracked"; exit 1; \
	fi

bench:
	go test -run='^$$' -bench=. -benchmem ./internal/... ./loadtest/...
