#!/usr/bin/env bash
# Prints the path of a helm binary, building it once from its Go module
# (no download site is needed: the Go module proxy serves Helm's source)
# and caching it next to the devcluster's binaries.
set -euo pipefail
version="${HELM_VERSION:-v3.22.0}"
cache="${DEVCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-devcluster}"
bin="$cache/bin/helm-$version"
if [ ! -x "$bin" ]; then
	mkdir -p "$cache/bin"
	echo "building helm $version (once; a few minutes on 2 cores)" >&2
	# Outside any module, so that no go.mod or go.sum is touched.
	dir="$(cd / && GOWORK=off GOFLAGS= go mod download -json "helm.sh/helm/v3@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[ -n "$dir" ] || { echo "helm.sh/helm/v3@$version: not downloaded" >&2; exit 1; }
	(cd "$dir" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$bin.tmp" ./cmd/helm)
	mv "$bin.tmp" "$bin"
fi
echo "$bin"
