#!/usr/bin/env bash
# Idempotent setup of the React reward server: Debian chromium + the locked Node dependencies.
# Usage: bash reward_servers/react/setup.sh [NODE_DIR]      (safe to run again; does nothing when up to date)
# NODE_DIR (default: this folder, as in a clone) gets package.json, package-lock.json and node_modules; an installed
# verl-bot runs `python -m reward_servers.react.node_deps`, which passes the folder the server reads (node_deps.py).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NODE_DIR=${1:-${HERE}}

if ! command -v node >/dev/null 2>&1; then
  echo "setup.sh: node (>= 18) and npm are required" >&2
  exit 1
fi
node -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' || {
  echo "setup.sh: node >= 18 required, found $(node --version)" >&2; exit 1; }

CHROMIUM="${REACT_REWARD_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
  else
    echo "setup.sh: $CHROMIUM missing; install Debian's chromium (apt-get install chromium)" >&2
    exit 1
  fi
fi

mkdir -p "$NODE_DIR"
cd "$NODE_DIR"
for f in package.json package-lock.json; do
  cmp -s "$HERE/$f" "$f" || cp "$HERE/$f" "$f"
done
# npm ci only when the lockfile differs from the one installed last time; never download a browser.
stamp=node_modules/.verl-bot-lock
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
node -e 'for (const m of ["esbuild", "eslint", "react", "react-dom", "lucide-react", "playwright-core", "tailwindcss"]) require.resolve(m)'
echo "react reward server: node $(node --version), $("$CHROMIUM" --version 2>/dev/null | head -1), node_modules ok in $NODE_DIR"
