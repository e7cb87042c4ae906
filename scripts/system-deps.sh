#!/usr/bin/env bash
# Install the Debian packages listed in scripts/apt-packages.txt that are not installed yet.
# Runs apt-get only when something is missing, so a warm machine pays nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/apt-packages.txt" | grep -v '^$')
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: not a Debian system; missing ${missing[*]} (tests that need them will skip)" >&2
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    echo "system-deps: not root; install ${missing[*]} with apt-get (tests that need them will skip)" >&2
    [ "${CI:-}" = "true" ] && exit 1
    exit 0
  fi
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Packages installed for their tools must not leave a daemon behind: `prometheus` ships a
# service its postinst starts unless policy-rc.d forbids it (as it does in this image).
if printf '%s\n' "${missing[@]}" | grep -qx prometheus; then
  if [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/prometheus ]; then
    $sudo /etc/init.d/prometheus stop >/dev/null 2>&1 || true
  fi
fi
