#!/usr/bin/env bash
# Installs what the inbox's browser test needs: Debian's chromium and puppeteer-core (which
# drives it; no browser download). Idempotent.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
STAMP="$DIR/node_modules/.loomflow-installed"
if [[ -f "$STAMP" && -d "$DIR/node_modules/puppeteer-core" && "$STAMP" -nt "$DIR/package.json" ]]; then
  exit 0
fi
export PUPPETEER_SKIP_DOWNLOAD=1
if [[ -f "$DIR/package-lock.json" ]]; then
  npm ci --prefix "$DIR" --no-audit --no-fund --loglevel=error >/dev/null
else
  npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error >/dev/null
fi
touch "$STAMP"
