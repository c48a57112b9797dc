#!/usr/bin/env bash
# Builds the Go tools the test suite drives, from the module pinned in hack/tools:
# helm (lint, template and server-side dry-run of deploy/helm) and promtool (check
# and unit-test the alert rules in deploy/monitoring).
#
# Same cache layout and stamp rule as build-binaries.sh: everything under
# $ESCHER_CACHE_DIR (default .cache/), and a second run with the same pins is a
# no-op. Called by `make tools` (and so by `make test`).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ESCHER_CACHE_DIR:-$repo/.cache}
bin=$cache/bin
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS=-modcacherw CGO_ENABLED=0
export GOTOOLCHAIN=local

if ! command -v go >/dev/null; then
  echo "build-tools: 'go' is not on PATH; install Go >= 1.26.7" >&2
  exit 1
fi

want=$( (cat "$repo"/hack/tools/go.{mod,sum} "$repo/hack/build-tools.sh"; go version) | sha256sum | cut -d' ' -f1)
if [[ -f $bin/.tools-stamp && $(cat "$bin/.tools-stamp") == "$want" ]] &&
   [[ -x $bin/helm && -x $bin/promtool ]]; then
  echo "build-tools: up to date in $bin"
  exit 0
fi
mkdir -p "$bin"
rm -f "$bin/.tools-stamp"

build() { # build <package> <output name>
  local start=$SECONDS
  echo "build-tools: building $2 ($1) ..."
  (cd "$repo/hack/tools" && go build -trimpath -ldflags "-s -w" -o "$bin/$2.tmp" "$1")
  mv "$bin/$2.tmp" "$bin/$2"
  echo "build-tools: $2 done in $((SECONDS - start))s"
}

total=$SECONDS
build helm.sh/helm/v4/cmd/helm helm
build github.com/prometheus/prometheus/cmd/promtool promtool
echo "$want" > "$bin/.tools-stamp"
echo "build-tools: all built in $((SECONDS - total))s into $bin"
