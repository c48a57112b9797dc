#!/usr/bin/env bash
# Builds the workload operators whose gangs the extender is to place (issue 60): KubeRay's
# ray-operator, Kueue's manager and Kubeflow's training operator, each from the Go module
# pinned in hack/operators/<name>, into $ESCHER_CACHE_DIR/bin (hack/lib.sh), and copies
# their CRDs (and the webhook configurations of Kueue and the training operator) from the
# same module into $ESCHER_CACHE_DIR/operators/<name>/, where
# harness/escher_harness/localcluster/operators.py finds them. Each operator has a stamp of its own, so a second run with the same pins is a
# no-op and a failed build leaves the others built.
# Called by `make operators` (and so by `make test` / `make e2e`); `hack/build-operators.sh
# kueue` builds one.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_go build-operators 1.26

# name | binary | module | package built | CRD directory in the module | extra manifests
operators=(
  "kuberay|ray-operator|github.com/ray-project/kuberay/ray-operator|github.com/ray-project/kuberay/ray-operator|config/crd/bases|"
  "kueue|kueue|sigs.k8s.io/kueue|sigs.k8s.io/kueue/cmd/kueue|config/components/crd/bases|config/components/webhook/manifests.yaml"
  "training-operator|training-operator|github.com/kubeflow/training-operator|github.com/kubeflow/training-operator/cmd/training-operator.v1|manifests/base/crds|manifests/base/webhook/manifests.yaml"
)

build_one() {
  local name=$1 binary=$bin/$2 module=$3 package=$4 crds=$5 extra=$6
  local pins=$repo/hack/operators/$name out=$cache/operators/$name
  local want version dir start=$SECONDS
  want=$(stamp_of "$pins"/go.{mod,sum} "$repo/hack/build-operators.sh")
  if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$want" && -x $binary ]]; then
    echo "build-operators: $name up to date ($binary, $out)"
    return
  fi
  mkdir -p "$bin"
  rm -rf "$out"
  mkdir -p "$out/crds"
  version=$(cd "$pins" && go list -m -f '{{.Version}}' "$module")
  local ldflags="-s -w"
  # Kueue logs and serves its version from these; without them it says v0.0.0-main.
  [[ $name == kueue ]] && ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version"
  go_build build-operators "$pins" "$package" "$binary" "$ldflags"
  # Only now: in a cold cache the module's directory exists once the build has downloaded it.
  dir=$(cd "$pins" && go list -m -f '{{.Dir}}' "$module")
  # The module's own CRDs (kustomize's kustomization.yaml beside them is not one).
  find "$dir/$crds" -maxdepth 1 -name '*.yaml' ! -name 'kustomization.yaml' \
    -exec cp {} "$out/crds/" \;
  [[ -n $extra ]] && cp "$dir/$extra" "$out/"
  chmod -R u+w "$out"
  echo "$version" > "$out/version"
  echo "$want" > "$out/.stamp"
  echo "build-operators: $name $version built in $((SECONDS - start))s" \
    "($(find "$out/crds" -name '*.yaml' | wc -l) CRDs in $out/crds)"
}

total=$SECONDS
for entry in "${operators[@]}"; do
  IFS='|' read -r name binary module package crds extra <<<"$entry"
  if (($# == 0)) || [[ " $* " == *" $name "* ]]; then
    build_one "$name" "$binary" "$module" "$package" "$crds" "$extra"
  fi
done
echo "build-operators: all done in $((SECONDS - total))s into $bin and $cache/operators"
