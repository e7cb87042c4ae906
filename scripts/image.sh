#!/usr/bin/env bash
# caldera's OCI image, built from what this machine reaches — Debian packages and PyPI wheels,
# no container registry and no Dockerfile engine:
#
#   1. base (cached in $CALDERA_IMAGE_CACHE, default ~/.cache/caldera/image, by the digest of
#      its inputs): a Debian bookworm root file system made by mmdebstrap (minbase) with the
#      pinned packages of deploy/image/debian-packages.txt, the wheels of
#      deploy/image/requirements.lock (pinned, sha256-checked) installed into /opt/caldera/lib,
#      a non-root user `caldera` (65532), and every shell removed;
#   2. caldera's own wheel (pip wheel .) in a second layer, so a code change rebuilds only it;
#   3. both packed by umoci into an OCI image layout, the image config set (user 65532,
#      entrypoint python3 -m caldera, no shell), and written as an OCI archive:
#      build/image/caldera-<version>.oci.tar (tag <version>), plus build/image/layout/.
#
# Reproducible inputs: pinned Debian versions, hashed wheels, SOURCE_DATE_EPOCH (the last
# commit's time) for every timestamp umoci and tar write.
#
# Usage: scripts/image.sh            build (the base only when its inputs changed)
#        scripts/image.sh --lock     rewrite deploy/image/requirements.lock from pyproject.toml
# Env:   CALDERA_IMAGE_CACHE  cache root;  CALDERA_IMAGE_OUT  output folder (build/image)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${CALDERA_IMAGE_CACHE:-$HOME/.cache/caldera/image}"
out="${CALDERA_IMAGE_OUT:-$root/build/image}"
lock="$root/deploy/image/requirements.lock"
debs="$root/deploy/image/debian-packages.txt"
python="${PYTHON:-python3}"
die() { echo "image: $*" >&2; exit 1; }

# The wheels of the image's platform: CPython 3.11 (Debian bookworm's python3) on x86_64.
platform_args=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
  --abi abi3 --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform linux_x86_64)

if [ "${1:-}" = "--lock" ]; then
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  "$python" -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install --quiet "$root"
  "$tmp/venv/bin/pip" freeze --exclude caldera >"$tmp/freeze.txt"
  "$python" -m pip download --quiet --no-deps -d "$tmp/wheels" -r "$tmp/freeze.txt" "${platform_args[@]}"
  "$python" - "$tmp/freeze.txt" "$tmp/wheels" "$lock" <<'PY'
import hashlib, pathlib, re, sys
pins = [line.strip() for line in open(sys.argv[1]) if line.strip()]
wheels = list(pathlib.Path(sys.argv[2]).iterdir())
norm = lambda name: re.sub(r"[-_.]+", "_", name).lower()
head = [line for line in pathlib.Path(sys.argv[3]).read_text().splitlines() if line.startswith("#")]
body = []
for pin in sorted(pins, key=str.lower):
    name, version = pin.split("==")
    (wheel,) = [w for w in wheels if norm(w.name.split("-")[0]) == norm(name) and w.name.split("-")[1] == version]
    body.append(f"{pin} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}")
pathlib.Path(sys.argv[3]).write_text("\n".join(head + body) + "\n")
PY
  echo "image: wrote $lock"; exit 0
fi

for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (apt-get install $tool; make system-deps does it)"
done
[ "$(id -u)" -eq 0 ] || die "mmdebstrap needs root here (or run it under unshare as your own user)"

export PIP_ROOT_USER_ACTION=ignore
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"
created="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
version="$("$python" -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$root/pyproject.toml")"
mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$debs" | grep -v '^$')
key="base-$(cat "$lock" "$debs" "$0" | sha256sum | cut -c1-16)"
base="$cache/$key"

# --- 1. the base: Debian + the dependency wheels, cached -----------------------------------
if [ ! -f "$base/.complete" ]; then
  mkdir -p "$cache"
  work="$(mktemp -d "$cache/.building-$key.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "image: Debian root file system (mmdebstrap, ${#packages[@]} pinned packages)" >&2
  # The host's apt sources: the mirror this machine reaches.
  sources="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | grep '^deb ' || true)"
  if [ -z "$sources" ]; then
    sources="deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main"
  fi
  include="$(IFS=,; echo "${packages[*]}")"
  printf '%s\n' "$sources" | mmdebstrap --quiet --variant=minbase --include="$include" \
    --customize-hook='echo "caldera:x:65532:65532:caldera:/home/caldera:/usr/sbin/nologin" >>"$1/etc/passwd"' \
    --customize-hook='echo "caldera:x:65532:" >>"$1/etc/group"' \
    --customize-hook='mkdir -p "$1/home/caldera" && chown 65532:65532 "$1/home/caldera"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/info' \
    --customize-hook='rm -f "$1"/bin/sh "$1"/bin/bash "$1"/bin/dash "$1"/usr/bin/sh "$1"/usr/bin/bash "$1"/usr/bin/dash "$1"/bin/rbash "$1"/usr/bin/rbash' \
    bookworm "$work/rootfs" - \
    || die "mmdebstrap failed"
  echo "image: Python dependencies (deploy/image/requirements.lock, hashes checked)" >&2
  "$python" -m pip download --quiet --no-deps --require-hashes -d "$work/wheels" -r "$lock" \
    "${platform_args[@]}" || die "pip download of the locked wheels failed"
  "$python" -m pip install --quiet --no-deps --no-index --no-compile --require-hashes \
    --find-links "$work/wheels" --target "$work/rootfs/opt/caldera/lib" -r "$lock" \
    || die "installing the locked wheels failed"
  rm -rf "$work/rootfs/opt/caldera/lib/bin" "$work/wheels"
  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:base"
  umoci unpack --image "$work/layout:base" "$work/bundle" >/dev/null
  rm -rf "$work/bundle/rootfs" && mv "$work/rootfs" "$work/bundle/rootfs"
  umoci repack --refresh-bundle --history.created "$created" --history.created_by "scripts/image.sh: Debian + requirements.lock" \
    --image "$work/layout:base" "$work/bundle"
  rm -rf "$work/bundle"
  touch "$work/.complete"
  rm -rf "$base" && mv "$work" "$base"
  trap - EXIT
fi

# --- 2. caldera's wheel, one more layer ----------------------------------------------------
rm -rf "$out" && mkdir -p "$out"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$work/dist" "$root" 2>/dev/null \
  || "$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$root" || die "pip wheel . failed"
cp -a "$base/layout" "$out/layout"
umoci unpack --image "$out/layout:base" "$work/bundle" >/dev/null
"$python" -m pip install --quiet --no-deps --no-index --no-compile --upgrade \
  --target "$work/bundle/rootfs/opt/caldera/lib" "$work"/dist/caldera-*.whl
rm -rf "$work/bundle/rootfs/opt/caldera/lib/bin"
# pip records where the wheel was (a temporary path): not part of the image.
for record in "$work"/bundle/rootfs/opt/caldera/lib/caldera-*.dist-info; do
  rm -f "$record/direct_url.json"
  sed -i '/direct_url.json/d' "$record/RECORD"
done
# Every file of the new layer gets the same time, for a reproducible layer.
find "$work/bundle/rootfs/opt/caldera" -newer "$base/.complete" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
umoci repack --history.created "$created" --history.created_by "scripts/image.sh: caldera ${version}" \
  --image "$out/layout:base" "$work/bundle"
umoci config --image "$out/layout:base" --tag "$version" --created "$created" \
  --history.created "$created" --history.created_by "scripts/image.sh: config" \
  --author "caldera" --config.user 65532:65532 --config.workingdir /home/caldera \
  --config.env PYTHONPATH=/opt/caldera/lib --config.env PYTHONDONTWRITEBYTECODE=1 \
  --config.env HOME=/home/caldera --config.env PATH=/usr/local/bin:/usr/bin:/bin \
  --config.entrypoint /usr/bin/python3 --config.entrypoint -m --config.entrypoint caldera \
  --config.cmd k8s --config.cmd run --config.cmd --config --config.cmd /etc/caldera/caldera.yaml \
  --config.label "org.opencontainers.image.title=caldera" \
  --config.label "org.opencontainers.image.version=${version}" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0"
umoci rm --image "$out/layout:base"
umoci gc --layout "$out/layout"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -C "$out/layout" -cf "$out/caldera-${version}.oci.tar" .
digest="$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$out/layout/index.json" | head -1)"
size="$(du -b "$out/caldera-${version}.oci.tar" | cut -f1)"
echo "$digest" >"$out/digest"
echo "image: caldera:${version} ${digest} ($(( size / 1048576 )) MiB) in $out/caldera-${version}.oci.tar" >&2
echo "$out/caldera-${version}.oci.tar"
