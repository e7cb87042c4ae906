#!/usr/bin/env bash
# Install the /ui dashboard's front-end assets from the npm registry (versions and sha512
# integrity pinned in ui/package-lock.json, checked by `npm ci`) and copy the files the
# package serves into src/caldera/service/ui/static/vendor/, which is committed: a wheel and an
# editable install then carry them without Node.js. Run it (make ui-assets) to change versions.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
vendor="$root/src/caldera/service/ui/static/vendor"
if ! command -v npm >/dev/null 2>&1; then
  echo "ui-assets: npm not found: install Node.js and npm, then run make ui-assets" >&2
  exit 1
fi
npm ci --prefix "$root/ui" --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
mkdir -p "$vendor"
cp "$root/ui/node_modules/htmx.org/dist/htmx.min.js" "$vendor/htmx.min.js"
cp "$root/ui/node_modules/htmx.org/LICENSE" "$vendor/htmx.LICENSE"
