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
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_go build-peers 1.26
peers=$cache/peers
binary=$bin/kube-scheduler-plugins
crd=$peers/scheduling.x-k8s.io_podgroups.yaml
module=$repo/hack/scheduler-plugins

stamp=$peers/.stamp
want=$(stamp_of "$module"/go.{mod,sum} "$repo/hack/build-peers.sh")
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $binary && -f $crd ]]; then
  echo "build-peers: up to date in $bin and $peers"
  exit 0
fi
mkdir -p "$bin" "$peers"
rm -f "$stamp"

total=$SECONDS
plugins=$(cd "$module" && go list -m -f '{{.Version}}' sigs.k8s.io/scheduler-plugins)
# The Kubernetes version is the one the scheduler's framework comes from, as
# scheduler-plugins' Makefile does.
go_build build-peers "$module" sigs.k8s.io/scheduler-plugins/cmd/scheduler "$binary" "$(k8s_ldflags "$module")"

# The module's own copy of the CRD its Coscheduling plugin reads PodGroups from.
src=$(cd "$module" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/coscheduling/crd.yaml
cp "$src" "$crd.tmp"
chmod 644 "$crd.tmp"
mv "$crd.tmp" "$crd"
echo "build-peers: PodGroup CRD copied to $crd"

echo "$want" > "$stamp"
echo "build-peers: all built in $((SECONDS - total))s into $bin (scheduler-plugins $plugins)"
