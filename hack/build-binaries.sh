#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver, kube-scheduler),
# kubectl (for the deploy/ manifests' tests) and the kwok controller (the fake
# nodes' kubelets) from the Go modules pinned in hack/etcd, hack/kubernetes and
# hack/kwok.
#
# Everything goes under $ESCHER_CACHE_DIR (default: .cache/ in the repository,
# which git ignores): the Go module cache, the Go build cache and bin/. A stamp
# file records what the binaries were built from, so a second run with the same
# pins is a no-op. Called by `make binaries` (and so by `make test` / `make demo`).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ESCHER_CACHE_DIR:-$repo/.cache}
bin=$cache/bin
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS=-modcacherw CGO_ENABLED=0
export GOTOOLCHAIN=local

if ! command -v go >/dev/null; then
  echo "build-binaries: 'go' is not on PATH; install Go >= 1.26 or set ESCHER_BIN_DIR to prebuilt binaries" >&2
  exit 1
fi

stamp_of() {
  cat "$repo"/hack/{kubernetes,etcd,kwok}/go.{mod,sum} "$repo/hack/build-binaries.sh"
  go version
}
want=$(stamp_of | sha256sum | cut -d' ' -f1)
if [[ -f $bin/.stamp && $(cat "$bin/.stamp") == "$want" ]] &&
   [[ -x $bin/etcd && -x $bin/kube-apiserver && -x $bin/kube-scheduler && -x $bin/kubectl && -x $bin/kwok ]]; then
  echo "build-binaries: up to date in $bin"
  exit 0
fi
mkdir -p "$bin"
rm -f "$bin/.stamp"

k8s=$(cd "$repo/hack/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$k8s" | cut -d. -f2)
ldk="-s -w"
for kv in gitVersion="$k8s" gitMajor=1 gitMinor="$minor" gitTreeState=clean \
          buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
  ldk+=" -X k8s.io/component-base/version.$kv"
done

build() { # build <module dir> <package> <output name> <ldflags>
  local start=$SECONDS
  echo "build-binaries: building $3 ($2) ..."
  (cd "$repo/hack/$1" && go build -trimpath -ldflags "$4" -o "$bin/$3.tmp" "$2")
  mv "$bin/$3.tmp" "$bin/$3"
  echo "build-binaries: $3 done in $((SECONDS - start))s"
}

total=$SECONDS
build etcd . etcd "-s -w"
build kubernetes k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$ldk"
build kubernetes k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$ldk"
build kubernetes k8s.io/kubernetes/cmd/kubectl kubectl "$ldk"
build kwok sigs.k8s.io/kwok/cmd/kwok kwok "-s -w"
echo "$want" > "$bin/.stamp"
echo "build-binaries: all built in $((SECONDS - total))s into $bin (kubernetes $k8s)"
