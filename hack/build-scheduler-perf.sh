#!/usr/bin/env bash
# Builds kube-scheduler's own benchmark harness, scheduler_perf
# (k8s.io/kubernetes/test/integration/scheduler_perf), from the release pinned in
# hack/scheduler-perf: `go test -c` of that wrapper module gives
# bin/scheduler-perf.test; what it reads at run time from upstream's sources is
# copied into scheduler-perf/ beside it: the node and pod templates the test-case
# files name by path, upstream's misc/performance-config.yaml (its thresholds),
# and the test apiserver's certificate fixture.
#
# Same cache as hack/build-binaries.sh ($ESCHER_CACHE_DIR, default .cache/ in
# the repository): the Go module and build caches (shared, so most of Kubernetes
# is compiled already), bin/ and scheduler-perf/. A stamp file of its own records
# what was built from what, so a second run with the same pins is a no-op.
# Called by `make scheduler-perf` and `escher-extender bench scheduler-perf` (which runs the
# binary), on demand only: not by `make test`, `make demo` or CI.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ESCHER_CACHE_DIR:-$repo/.cache}
bin=$cache/bin
binary=$bin/scheduler-perf.test
data=$cache/scheduler-perf
module=$repo/hack/scheduler-perf
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS=-modcacherw CGO_ENABLED=0
export GOTOOLCHAIN=local

if ! command -v go >/dev/null; then
  echo "build-scheduler-perf: 'go' is not on PATH; install Go >= 1.26" >&2
  exit 1
fi

# One Kubernetes for the project: this module must pin the release hack/kubernetes pins (the
# control plane's binaries). Checked before the stamp, so a bump there cannot leave a stale
# binary here looking up to date.
pin() { sed -n 's/^\(require\)\{0,1\}[[:space:]]*k8s\.io\/kubernetes \(v[0-9.]*\)$/\2/p' "$1" | head -1; }
k8s=$(pin "$module/go.mod")
want_k8s=$(pin "$repo/hack/kubernetes/go.mod")
if [[ -z $want_k8s || $k8s != "$want_k8s" ]]; then
  cat >&2 <<EOF
build-scheduler-perf: hack/scheduler-perf pins k8s.io/kubernetes ${k8s:-?}, hack/kubernetes pins ${want_k8s:-?}.
Re-pin it (the staging modules are v0.<minor>.<patch> of the same release):
  sed -i 's/ ${k8s}/ ${want_k8s}/; s/ v0${k8s#v1}/ v0${want_k8s#v1}/' hack/scheduler-perf/go.mod
  (cd hack/scheduler-perf && go mod tidy)
EOF
  exit 1
fi

stamp=$data/.stamp
stamp_of() {
  cat "$module"/go.{mod,sum} "$module"/*.go "$repo/hack/build-scheduler-perf.sh"
  go version
}
want=$(stamp_of | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $binary && -f $data/kubernetes-version ]]; then
  echo "build-scheduler-perf: up to date in $binary"
  exit 0
fi
mkdir -p "$bin" "$data"
rm -f "$stamp"

total=$SECONDS
minor=$(echo "$k8s" | cut -d. -f2)
# As hack/build-binaries.sh: without these the in-process components report v0.0.0-master.
ldflags="-s -w"
for kv in gitVersion="$k8s" gitMajor=1 gitMinor="$minor" gitTreeState=clean \
          buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
  ldflags+=" -X k8s.io/component-base/version.$kv"
done

echo "build-scheduler-perf: compiling scheduler_perf (kubernetes $k8s) ..."
# -trimpath as in build-binaries.sh, so the packages it compiled are reused from GOCACHE.
(cd "$module" && go test -c -trimpath -ldflags "$ldflags" -o "$binary.tmp" .)
mv "$binary.tmp" "$binary"

# Upstream's templates, as the test cases under test/integration/scheduler_perf name them, and
# its misc/performance-config.yaml (the harness prints its thresholds beside the results).
kdir=$(cd "$module" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
src=$kdir/test/integration/scheduler_perf
rm -rf "$data/templates" "$data/misc" "$data/src"
mkdir -p "$data/misc"
cp -r "$src/templates" "$data/templates"
cp -r "$src/misc/templates" "$data/misc/templates"
cp "$src/misc/performance-config.yaml" "$data/misc/"
# The in-process kube-apiserver reads its serving-cert fixture from its package's source
# directory, found with runtime.Caller; -trimpath leaves that path relative, and the test
# server then joins it to $TEST_SRCDIR/$TEST_WORKSPACE (its Bazel hook). The harness sets
# TEST_SRCDIR=$data and TEST_WORKSPACE=src, so the fixture is looked up here.
fixture=src/k8s.io/kubernetes@$k8s/cmd/kube-apiserver/app/testing
mkdir -p "$data/$fixture"
cp -r "$kdir/cmd/kube-apiserver/app/testing/testdata" "$data/$fixture/"
chmod -R u+w "$data/templates" "$data/misc" "$data/src"
echo "$k8s" > "$data/kubernetes-version"

echo "$want" > "$stamp"
echo "build-scheduler-perf: built in $((SECONDS - total))s: $binary (kubernetes $k8s), templates in $data"
