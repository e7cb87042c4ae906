#!/usr/bin/env bash
# Build Helm (v4) from the Go module proxy into the same cache as the control plane's binaries,
# for the chart's tests (tests/k8s_real/test_real_helm.py) and `make chart-lint`:
#
#   $CALDERA_HELM_BINS (default ~/.cache/caldera/helm-bins)/helm-<version>/bin/helm
#
# helm.sh/helm/v4 builds as released (`go install mod@version`): its go.mod has no replace
# block. As scripts/cluster-bins.sh does, a folder counts only when its `.complete` marker
# exists (built into a temporary folder renamed into place), and a complete one is never rebuilt.
#
# Usage: scripts/helm-bin.sh          build if needed, print the path of the helm binary
#        scripts/helm-bin.sh --path   print it if built, else exit 1
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v4.3.2}"
root="${CALDERA_HELM_BINS:-$HOME/.cache/caldera/helm-bins}"
dest="$root/helm-${HELM_VERSION}"

die() { echo "helm-bin: $*" >&2; exit 1; }

if [ -f "$dest/.complete" ]; then
  echo "$dest/bin/helm"; exit 0
fi
[ "${1:-}" = "--path" ] && exit 1
command -v go >/dev/null 2>&1 || die "Go is not installed (needed to build Helm)"

mkdir -p "$root"
work="$(mktemp -d "$root/.building-helm-${HELM_VERSION}.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod -trimpath -buildvcs=false" CGO_ENABLED=0
STEP_PREFIX="helm-bin: building" STEP_TIMING="${HELM_BIN_TIMING:-}"
. "$(dirname "$0")/build-step.sh"
step "helm ${HELM_VERSION}" env GOBIN="$work/bin" go install -ldflags="-s -w" \
  "helm.sh/helm/v4/cmd/helm@${HELM_VERSION}"
[ -x "$work/bin/helm" ] || die "helm was not built"
{ echo "helm ${HELM_VERSION}"; go version; } >"$work/VERSIONS"
touch "$work/.complete"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/bin/helm"
