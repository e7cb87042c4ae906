#!/usr/bin/env bash
# Build the real Volcano that the dev cluster runs beside kube-scheduler (tests/k8s_real,
# `caldera compare --runtime k8s --modes volcano,…`) from the Go module proxy, into a cache that
# later runs reuse:
#
#   $CALDERA_VOLCANO_BINS (default ~/.cache/caldera/volcano-bins)/<versions>/
#     bin/vc-scheduler bin/vc-controller-manager bin/vc-webhook-manager
#     crd/volcano/*.yaml crd/jobflow/*.yaml          Volcano's CRDs, from the same module zip
#
# The proxy serves volcano.sh/volcano only at exact versions (its @v/list is 403), and
# volcano.sh/apis only at v1.14.0 and v1.13.0. volcano's go.mod replaces volcano.sh/apis by
# ./staging/src/volcano.sh/apis, a nested module that the module zip leaves out, so the module
# is copied to a temporary folder and its apis replace pointed at a served release instead.
# Volcano v1.15.x needs apis newer than v1.14.0 (it uses v1beta1.QueueAllocationGateKey, which
# v1.14.0 lacks), so the pinned pair is volcano v1.14.1 with apis v1.14.0.
#
# Nothing of Volcano is committed: the build happens in the cache. As scripts/cluster-bins.sh
# does (its own cache, untouched here), a folder counts only when its `.complete` marker
# exists: everything is built into a temporary folder renamed into place at the end, so a build
# that fails midway leaves nothing that looks complete, and a complete folder is never rebuilt.
#
# Usage: scripts/volcano-bins.sh            build if needed, print the folder (bin/, crd/)
#        scripts/volcano-bins.sh --path     print the folder if complete, else exit 1
# Env:   CALDERA_VOLCANO_BINS  cache root;  VOLCANO_BINS_TIMING=FILE  append /usr/bin/time -v
#        output of each build step to FILE (used for docs/kubernetes.md).
set -euo pipefail

VOLCANO_VERSION="${VOLCANO_VERSION:-v1.14.1}"
VOLCANO_APIS_VERSION="${VOLCANO_APIS_VERSION:-v1.14.0}"

root="${CALDERA_VOLCANO_BINS:-$HOME/.cache/caldera/volcano-bins}"
key="volcano-${VOLCANO_VERSION}_apis-${VOLCANO_APIS_VERSION}"
dest="$root/$key"

die() { echo "volcano-bins: $*" >&2; exit 1; }

if [ "${1:-}" = "--path" ]; then
  [ -f "$dest/.complete" ] || exit 1
  echo "$dest"; exit 0
fi
if [ -f "$dest/.complete" ]; then
  echo "$dest"; exit 0
fi

command -v go >/dev/null 2>&1 || die "Go is not installed (needed to build Volcano)"
mkdir -p "$root"

export GOFLAGS="-mod=mod"
mod_dir() {  # mod_dir MODULE@VERSION: download it, print its (read-only) folder in the modcache
  local info
  info="$(go mod download -json "$1" 2>&1)" || {
    local why
    why="$(printf '%s\n' "$info" | sed -n 's/.*"Error": "\(.*\)".*/\1/p' | head -1)"
    die "cannot download $1 from the Go module proxy: ${why##*: }"
  }
  printf '%s\n' "$info" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p'
}
src="$(mod_dir "volcano.sh/volcano@${VOLCANO_VERSION}")"
[ -f "$src/go.mod" ] || die "no go.mod in volcano.sh/volcano@${VOLCANO_VERSION}"
mod_dir "volcano.sh/apis@${VOLCANO_APIS_VERSION}" >/dev/null

work="$(mktemp -d "$root/.building-${key}.XXXXXX")"
cleanup() { chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/bin" "$work/crd"
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"   # the module cache is read-only

export GOFLAGS="-mod=mod -trimpath -buildvcs=false"
export CGO_ENABLED=0       # as Volcano's own Makefile builds these three
ldflags="-s -w -X volcano.sh/volcano/pkg/version.Version=${VOLCANO_VERSION}"
STEP_PREFIX="volcano-bins" STEP_TIMING="${VOLCANO_BINS_TIMING:-}"
. "$(dirname "$0")/build-step.sh"

(
  cd "$work/src"
  go mod edit -replace "volcano.sh/apis=volcano.sh/apis@${VOLCANO_APIS_VERSION}"
  grep -q "volcano.sh/apis => volcano.sh/apis ${VOLCANO_APIS_VERSION}" go.mod \
    || die "the apis replace of volcano.sh/volcano@${VOLCANO_VERSION} was not understood"
  step "go mod download (volcano ${VOLCANO_VERSION}, apis ${VOLCANO_APIS_VERSION})" go mod download
  step "vc-scheduler vc-controller-manager vc-webhook-manager" \
    go build -ldflags="$ldflags" -o "$work/bin/" ./cmd/scheduler ./cmd/controller-manager \
      ./cmd/webhook-manager
)
for name in scheduler controller-manager webhook-manager; do
  [ -x "$work/bin/$name" ] || die "$name was not built"
  mv "$work/bin/$name" "$work/bin/vc-$name"
done
for part in volcano jobflow; do
  ls "$work/src/config/crd/$part/bases/"*.yaml >/dev/null 2>&1 \
    || die "volcano.sh/volcano@${VOLCANO_VERSION} has no config/crd/$part/bases"
  mkdir -p "$work/crd/$part"
  cp "$work/src/config/crd/$part/bases/"*.yaml "$work/crd/$part/"
done
cp "$work/src/go.mod" "$work/src/go.sum" "$work/"
{
  echo "volcano ${VOLCANO_VERSION} (volcano.sh/volcano, from the Go module proxy)"
  echo "apis ${VOLCANO_APIS_VERSION} (replaces ./staging/src/volcano.sh/apis, absent from the module zip)"
  go version
} >"$work/VERSIONS"
rm -rf "$work/src"
touch "$work/.complete"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest"
