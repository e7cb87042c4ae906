#!/usr/bin/env bash
# Build the binaries of the real control plane the tests run (tests/k8s_real, `caldera k8s
# dev-cluster`) from Go modules, into a cache that later runs reuse:
#
#   $CALDERA_CLUSTER_BINS (default ~/.cache/caldera/cluster-bins)/<versions>/bin/
#     kube-apiserver kube-controller-manager kube-scheduler kubectl   k8s.io/kubernetes
#     etcd                                                            go.etcd.io/etcd/server/v3
#     kwok                                                            sigs.k8s.io/kwok
#
# k8s.io/kubernetes cannot be built with `go install mod@version`: its go.mod points every
# k8s.io/* staging module at ./staging/src/...  So a wrapper module is generated whose replace
# block points each of those modules at its published v0.<minor>.<patch> release, read from the
# tag's own go.mod (so a new tag needs no edit here). etcd is built in the same module at the
# version Kubernetes itself requires, so both share compiled packages.
#
# A cache folder counts only when its `.complete` marker exists: everything is built into a
# temporary folder that is renamed into place at the end, so a build that fails midway leaves
# nothing that looks complete. An existing complete folder is never rebuilt.
#
# Usage: scripts/cluster-bins.sh            build if needed, print the bin folder
#        scripts/cluster-bins.sh --path     print the bin folder if complete, else exit 1
# Env:   CALDERA_CLUSTER_BINS  cache root;  CLUSTER_BINS_TIMING=FILE  append /usr/bin/time -v
#        output of each build step to FILE (used for docs/kubernetes.md).
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
# etcd: the server release matching the go.etcd.io/etcd/* version that Kubernetes requires
# (read from its go.mod below), so the API server runs against the etcd it is tested with.

root="${CALDERA_CLUSTER_BINS:-$HOME/.cache/caldera/cluster-bins}"

die() { echo "cluster-bins: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed (needed to build the control plane)"

mkdir -p "$root"

# The tag's go.mod, from the module proxy (small; the source follows only when building).
kube_mod_info="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}")" \
  || die "cannot download k8s.io/kubernetes@${KUBE_VERSION}"
kube_gomod="$(printf '%s\n' "$kube_mod_info" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
[ -f "$kube_gomod" ] || die "no go.mod for k8s.io/kubernetes@${KUBE_VERSION}"
etcd_version="$(sed -n 's/^[[:space:]]*go.etcd.io\/etcd\/server\/v3 \(v[0-9.]*\).*/\1/p' "$kube_gomod" | head -1)"
[ -n "$etcd_version" ] || die "k8s.io/kubernetes@${KUBE_VERSION} names no go.etcd.io/etcd/server/v3"
staging_version="v0.${KUBE_VERSION#v1.}"

key="kube-${KUBE_VERSION}_etcd-${etcd_version}_kwok-${KWOK_VERSION}"
dest="$root/$key"
if [ "${1:-}" = "--path" ]; then
  [ -f "$dest/.complete" ] || exit 1
  echo "$dest/bin"; exit 0
fi
if [ -f "$dest/.complete" ]; then
  echo "$dest/bin"; exit 0
fi

work="$(mktemp -d "$root/.building-${key}.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/bin" "$work/kube"

export GOFLAGS="-mod=mod -trimpath -buildvcs=false"
export CGO_ENABLED=0
ldflags="-s -w"
STEP_PREFIX="cluster-bins: building" STEP_TIMING="${CLUSTER_BINS_TIMING:-}"
. "$(dirname "$0")/build-step.sh"

# --- the wrapper module for k8s.io/kubernetes -----------------------------------------------
{
  echo "module caldera.local/cluster-bins"
  echo
  sed -n 's/^go \(.*\)/go \1/p' "$kube_gomod" | head -1
  echo
  echo "require ("
  echo "	k8s.io/kubernetes ${KUBE_VERSION}"
  echo "	go.etcd.io/etcd/server/v3 ${etcd_version}"
  echo ")"
  echo
  echo "replace ("
  # every `k8s.io/X => ./staging/src/k8s.io/X` of the tag becomes `k8s.io/X => k8s.io/X v0.M.P`
  sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/src/.*#\t\1 => \1 '"${staging_version}"'#p' \
    "$kube_gomod"
  echo ")"
} >"$work/kube/go.mod"
grep -q "k8s.io/api => k8s.io/api ${staging_version}" "$work/kube/go.mod" \
  || die "the replace block of k8s.io/kubernetes@${KUBE_VERSION} was not understood"
cat >"$work/kube/tools.go" <<'EOF'
//go:build tools

// Package tools pins the commands this module builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
(
  cd "$work/kube"
  step "go mod tidy (k8s.io/kubernetes ${KUBE_VERSION}, etcd ${etcd_version})" go mod tidy
  step "kube-apiserver kube-controller-manager kube-scheduler kubectl" \
    go build -ldflags="$ldflags" -o "$work/bin/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  step "etcd ${etcd_version}" go build -ldflags="$ldflags" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3
)

# --- KWOK: its go.mod has no replace block, so the tag builds as released ------------------
step "kwok ${KWOK_VERSION}" env GOBIN="$work/bin" go install -ldflags="$ldflags" \
  "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"

for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok; do
  [ -x "$work/bin/$b" ] || die "$b was not built"
done
cp "$work/kube/go.mod" "$work/kube/go.sum" "$work/"
{
  echo "kubernetes ${KUBE_VERSION} (staging modules ${staging_version})"
  echo "etcd ${etcd_version}"
  echo "kwok ${KWOK_VERSION}"
  go version
} >"$work/VERSIONS"
rm -rf "$work/kube"
touch "$work/.complete"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/bin"
