#!/usr/bin/env bash
# Builds the Go tools the test suite drives, from the module pinned in hack/tools:
# helm (for the chart's tests) and promtool (check and unit-test the alert rules
# in deploy/monitoring), into $ESCHER_CACHE_DIR/bin (hack/lib.sh). A stamp of its
# own makes a second run with the same pins a no-op. Called by `make tools` (and
# so by `make test`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_go build-tools 1.26.7

want=$(stamp_of "$repo"/hack/tools/go.{mod,sum} "$repo/hack/build-tools.sh")
if [[ -f $bin/.tools-stamp && $(cat "$bin/.tools-stamp") == "$want" ]] &&
   [[ -x $bin/helm && -x $bin/promtool ]]; then
  echo "build-tools: up to date in $bin"
  exit 0
fi
mkdir -p "$bin"
rm -f "$bin/.tools-stamp"

total=$SECONDS
go_build build-tools "$repo/hack/tools" helm.sh/helm/v4/cmd/helm "$bin/helm" "-s -w"
go_build build-tools "$repo/hack/tools" github.com/prometheus/prometheus/cmd/promtool "$bin/promtool" "-s -w"
echo "$want" > "$bin/.tools-stamp"
echo "build-tools: all built in $((SECONDS - total))s into $bin"
