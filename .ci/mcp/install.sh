#!/usr/bin/env bash
# Installs the MCP reference servers the MCP tests and the mcp_tools example run against
# (@modelcontextprotocol/server-everything and server-filesystem) into .ci/mcp/node_modules,
# at the versions pinned by package-lock.json. Idempotent.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STAMP="$DIR/node_modules/.loomflow-installed"
if [[ -f "$STAMP" && -d "$DIR/node_modules/@modelcontextprotocol/server-everything" \
  && -d "$DIR/node_modules/@modelcontextprotocol/server-filesystem" \
  && "$STAMP" -nt "$DIR/package.json" ]]; then
  exit 0
fi
if [[ -f "$DIR/package-lock.json" ]]; then
  npm ci --prefix "$DIR" --no-audit --no-fund --loglevel=error >/dev/null
else
  npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error >/dev/null
fi
touch "$STAMP"
