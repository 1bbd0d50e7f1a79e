#!/usr/bin/env bash
# Install the pinned mermaid + jsdom into .ci/mermaid/node_modules (idempotent).
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STAMP="$DIR/node_modules/.loomflow-installed"
if [[ -f "$STAMP" && "$STAMP" -nt "$DIR/package-lock.json" && "$STAMP" -nt "$DIR/package.json" \
      && -d "$DIR/node_modules/mermaid" && -d "$DIR/node_modules/jsdom" ]]; then
  exit 0
fi
if [[ -f "$DIR/package-lock.json" ]]; then
  npm ci --prefix "$DIR" --no-audit --no-fund --loglevel=error >/dev/null
else
  npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error >/dev/null
fi
touch "$STAMP"
