#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver, kube-scheduler, and
# kube-controller-manager: mode dra needs its garbage collector and resource-claim controller),
# kubectl (for the deploy/ manifests' tests) and the kwok controller (the fake
# nodes' kubelets) from the Go modules pinned in hack/etcd, hack/kubernetes and
# hack/kwok, into $ESCHER_CACHE_DIR/bin (hack/lib.sh). A stamp file records what
# the binaries were built from, so a second run with the same pins is a no-op.
# Called by `make binaries` (and so by `make test` / `make demo`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_go build-binaries 1.26

want=$(stamp_of "$repo"/hack/{kubernetes,etcd,kwok}/go.{mod,sum} "$repo/hack/build-binaries.sh")
if [[ -f $bin/.stamp && $(cat "$bin/.stamp") == "$want" ]] &&
   [[ -x $bin/etcd && -x $bin/kube-apiserver && -x $bin/kube-scheduler && -x $bin/kube-controller-manager && -x $bin/kubectl && -x $bin/kwok ]]; then
  echo "build-binaries: up to date in $bin"
  exit 0
fi
mkdir -p "$bin"
rm -f "$bin/.stamp"

k8s=$repo/hack/kubernetes
ldk=$(k8s_ldflags "$k8s")
total=$SECONDS
go_build build-binaries "$repo/hack/etcd" . "$bin/etcd" "-s -w"
go_build build-binaries "$k8s" k8s.io/kubernetes/cmd/kube-scheduler "$bin/kube-scheduler" "$ldk"
go_build build-binaries "$k8s" k8s.io/kubernetes/cmd/kube-apiserver "$bin/kube-apiserver" "$ldk"
go_build build-binaries "$k8s" k8s.io/kubernetes/cmd/kube-controller-manager "$bin/kube-controller-manager" "$ldk"
go_build build-binaries "$k8s" k8s.io/kubernetes/cmd/kubectl "$bin/kubectl" "$ldk"
go_build build-binaries "$repo/hack/kwok" sigs.k8s.io/kwok/cmd/kwok "$bin/kwok" "-s -w"
echo "$want" > "$bin/.stamp"
echo "build-binaries: all built in $((SECONDS - total))s into $bin" \
  "(kubernetes $(cd "$k8s" && go list -m -f '{{.Version}}' k8s.io/kubernetes))"
