#!/usr/bin/env bash
# Builds the benchmark's in-framework gang-scheduling peer that is not part of
# Kubernetes itself: kube-scheduler-plugins, the kube-scheduler of
# sigs.k8s.io/scheduler-plugins with the Coscheduling plugin, from the module
# pinned in hack/scheduler-plugins; and copies its PodGroup CRD next to it.
# (The other peer, native gang scheduling, is in the kube-scheduler that
# hack/build-binaries.sh builds.)
#
# Same cache as hack/build-binaries.sh ($ESCHER_CACHE_DIR, default .cache/ in
# the repository): the Go module and build caches, bin/kube-scheduler-plugins
# and peers/scheduling.x-k8s.io_podgroups.yaml. A stamp file of its own records
# what they were built from, so a second run with the same pins is a no-op.
# Called by `make peers`.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ESCHER_CACHE_DIR:-$repo/.cache}
bin=$cache/bin
peers=$cache/peers
binary=$bin/kube-scheduler-plugins
crd=$peers/scheduling.x-k8s.io_podgroups.yaml
module=$repo/hack/scheduler-plugins
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS=-modcacherw CGO_ENABLED=0
export GOTOOLCHAIN=local

if ! command -v go >/dev/null; then
  echo "build-peers: 'go' is not on PATH; install Go >= 1.24" >&2
  exit 1
fi

stamp=$peers/.stamp
stamp_of() {
  cat "$module"/go.{mod,sum} "$repo/hack/build-peers.sh"
  go version
}
want=$(stamp_of | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $binary && -f $crd ]]; then
  echo "build-peers: up to date in $bin and $peers"
  exit 0
fi
mkdir -p "$bin" "$peers"
rm -f "$stamp"

total=$SECONDS
plugins=$(cd "$module" && go list -m -f '{{.Version}}' sigs.k8s.io/scheduler-plugins)
k8s=$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$k8s" | cut -d. -f2)
# Without these the binary reports v0.0.0-master; the Kubernetes version is the
# one the scheduler's framework comes from, as scheduler-plugins' Makefile does.
ldflags="-s -w"
for kv in gitVersion="$k8s" gitMajor=1 gitMinor="$minor" gitTreeState=clean \
          buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
  ldflags+=" -X k8s.io/component-base/version.$kv"
done

start=$SECONDS
echo "build-peers: building kube-scheduler-plugins (scheduler-plugins $plugins, kubernetes $k8s) ..."
(cd "$module" && go build -trimpath -ldflags "$ldflags" -o "$binary.tmp" sigs.k8s.io/scheduler-plugins/cmd/scheduler)
mv "$binary.tmp" "$binary"
echo "build-peers: kube-scheduler-plugins done in $((SECONDS - start))s"

# The module's own copy of the CRD its Coscheduling plugin reads PodGroups from.
src=$(cd "$module" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/coscheduling/crd.yaml
cp "$src" "$crd.tmp"
chmod 644 "$crd.tmp"
mv "$crd.tmp" "$crd"
echo "build-peers: PodGroup CRD copied to $crd"

echo "$want" > "$stamp"
echo "build-peers: all built in $((SECONDS - total))s into $bin (scheduler-plugins $plugins)"
