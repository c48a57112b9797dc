# Sourced by hack/build-binaries.sh, build-peers.sh and build-tools.sh: the cache
# layout and Go environment they share, and their three steps (check Go, decide
# from a stamp whether anything changed, build a package). Each script keeps its
# own pins, outputs and stamp file.
#
# Everything goes under $ESCHER_CACHE_DIR (default: .cache/ in the repository,
# which git ignores): the Go module cache, the Go build cache and bin/.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ESCHER_CACHE_DIR:-$repo/.cache}
bin=$cache/bin
export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS=-modcacherw CGO_ENABLED=0
export GOTOOLCHAIN=local

# require_go <script> <minimum version>
require_go() {
  if ! command -v go >/dev/null; then
    echo "$1: 'go' is not on PATH; install Go >= $2 or set ESCHER_BIN_DIR to prebuilt binaries" >&2
    exit 1
  fi
}

# stamp_of <file>...: what a build is made from (its pins, its script, this file,
# the Go version), as one hash.
stamp_of() {
  (cat "$@" "$repo/hack/lib.sh"; go version) | sha256sum | cut -d' ' -f1
}

# k8s_ldflags <module dir>: stripped, with the version of the k8s.io/kubernetes
# the module pins (without it a binary reports v0.0.0-master).
k8s_ldflags() {
  local k8s minor flags="-s -w" kv
  k8s=$(cd "$1" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=$(echo "$k8s" | cut -d. -f2)
  for kv in gitVersion="$k8s" gitMajor=1 gitMinor="$minor" gitTreeState=clean \
            buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    flags+=" -X k8s.io/component-base/version.$kv"
  done
  echo "$flags"
}

# go_build <script> <module dir> <package> <output path> <ldflags>
go_build() {
  local start=$SECONDS
  echo "$1: building $(basename "$4") ($3) ..."
  (cd "$2" && go build -trimpath -ldflags "$5" -o "$4.tmp" "$3")
  mv "$4.tmp" "$4"
  echo "$1: $(basename "$4") done in $((SECONDS - start))s"
}
