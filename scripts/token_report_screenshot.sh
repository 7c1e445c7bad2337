#!/usr/bin/env bash
# docs/token_report.png: the token-credit report (tokens.html) of the committed token records of a `make demo`
# run (tests/fixtures/token_report/, the records tests/component/test_token_report.py renders), built by the report command
# and rendered by Debian's Chromium, headless; cropped to the token credit (the page's top is the reward plot).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-chromium}
OUT=${OUT:-docs/token_report.png}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m verl_bot.eval.training_report --out "$tmp/report" \
    --run bot=tests/fixtures/token_report/bot --run grpo=tests/fixtures/token_report/grpo
"$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-background-networking \
    --user-data-dir="$tmp/profile" --screenshot="$tmp/page.png" --window-size=1400,1750 \
    "file://$tmp/report/tokens.html" 2>/dev/null
"$PY" -c 'import sys; from PIL import Image; Image.open(sys.argv[1]).crop((0, 615, 1400, 1750)).save(sys.argv[2], optimize=True)' \
    "$tmp/page.png" "$OUT"
echo "$OUT"
