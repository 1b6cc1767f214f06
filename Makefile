# Sluice build, test and code generation.
#
# Tools are run with `go run pkg@version`, so nothing needs installing and the
# versions below are the only place they are pinned.

# controller-gen v0.19 is built against k8s.io 0.34, the version the API uses.
CONTROLLER_GEN_VERSION ?= v0.19.0
CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

# Directories that hold generated files; `verify` fails if they are stale.
GENERATED_DIRS := api config

.PHONY: all build test generate verify bench

all: build

build:
	go build -o bin/sluice ./cmd/sluice

# Unit tests, including the CRD validation tests in api/. Extend as needed
# (e.g. -race, or the end-to-end tests in test/e2e behind their own target).
test:
	go test ./...

# Deep-copy methods (api/v1beta1/zz_generated.deepcopy.go) and one CRD
# manifest per kind in config/crd/.
generate:
	$(CONTROLLER_GEN) object paths=./api/... \
		crd paths=./api/... output:crd:artifacts:config=config/crd

# Formatting, vet, and generated files up to date with the API types: a
# regeneration must change no tracked file and add no untracked one.
verify: generate
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt needed on:"; echo "$$unformatted"; exit 1; \
	fi
	go vet ./...
	@git diff --exit-code -- $(GENERATED_DIRS) || \
		{ echo "api/ or config/ changed after 'make generate': commit the types with the regenerated files"; exit 1; }
	@untracked="$$(git ls-files --others --exclude-standard -- $(GENERATED_DIRS))"; \
	if [ -n "$$untracked" ]; then \
		echo "untracked files (generated files must be committed):"; echo "$$untracked"; exit 1; \
	fi

bench:
	go test -run='^$$' -bench=. -benchmem ./internal/...
