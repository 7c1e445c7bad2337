#!/usr/bin/env bash
# docs/token_panel.png, docs/token_panel_tensorboard.png, docs/token_panel_histograms.png: what a verl-bot run sends
# to its experiment trackers (verl_bot/hooks/v1/tracker_panel.py), made from the committed token records of step 20 of
# a `make demo` run (tests/fixtures/token_report/bot/, the records tests/component/test_token_report.py renders) at the
# knobs' defaults (4 rollouts, up to 256 tokens each): the HTML panel as wandb shows it in its media panel, and
# TensorBoard's own pages (a local `tensorboard` server on the event file the hook's sender writes: the text
# dashboard with the Markdown panel, the histograms of r_t, S_t and A_t), all rendered by Debian's Chromium,
# headless. The histograms are of the recorded rollouts only (the records hold 4 of the step's 8 groups); S_t
# with the demo's w_g = 1, w_s = 0.5. The squares of the text panel are emoji: Chromium draws them with an emoji
# font (Debian: apt-get install fonts-noto-color-emoji).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-chromium}
OUT=${OUT:-docs}
fc-list 2>/dev/null | grep -qi emoji || echo "token_panel_screenshot.sh: no emoji font: the squares show as boxes" \
    "(apt-get install fonts-noto-color-emoji)" >&2
tmp=$(mktemp -d)
board=""
cleanup() {
    [[ -n "${board}" ]] && kill "${board}" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
"$PY" - "$tmp" <<'EOF'
import sys
from pathlib import Path

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from verl_bot.observe import panels
from verl_bot.hooks.v1.tracker_panel import send_tensorboard
from verl_bot.observe.token_records import read_records

out = Path(sys.argv[1])
records = read_records(Path("tests/fixtures/token_report/bot/token_records/step_20.jsonl"))
settings = panels.PanelSettings()
panel = records[: settings.rollouts]  # the records are sorted as the panel chooses: the smallest prompts first
(out / "panel.html").write_text(panels.panel_html(20, "bot", panel, settings.tokens), encoding="utf-8")
rewards = np.array([x for r in records for x in r["rewards"]])
values = {"rewards": rewards, "advantages": np.array([x for r in records for x in r["advantages"]]),
          "local": panels.local_signal(rewards, np.array([r["info"]["score"] for r in records]),
                                         np.array([len(r["rewards"]) for r in records]), 1.0, 0.5)}
writer = SummaryWriter(str(out / "tensorboard"))
send_tensorboard(writer, 20, panels.panel_markdown(20, "bot", panel, settings.tokens),
                 panels.step_histograms(values))
writer.close()
EOF
shot() {  # shot URL PNG WIDTH HEIGHT
    rm -rf "$tmp/profile"
    "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --disable-background-networking \
        --user-data-dir="$tmp/profile" --screenshot="$2" --window-size="$3,$4" --virtual-time-budget=15000 \
        "$1" 2>/dev/null
}
shot "file://$tmp/panel.html" "$tmp/panel.png" 1100 700
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/tensorboard --logdir "$tmp/tensorboard" --host 127.0.0.1 --port "$port" > "$tmp/tensorboard.log" 2>&1 &
board=$!
for _ in $(seq 60); do
    curl -sf "http://127.0.0.1:$port/data/plugins_listing" > /dev/null && break
    sleep 1
done
shot "http://127.0.0.1:$port/?darkMode=false#text" "$tmp/text.png" 1400 720
shot "http://127.0.0.1:$port/?darkMode=false#histograms" "$tmp/histograms.png" 1400 700
"$PY" - "$tmp" "$OUT" <<'EOF'
import sys
from pathlib import Path

from PIL import Image

tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
crops = {"panel.png": ("token_panel.png", (0, 0, 1100, 490)), "text.png": ("token_panel_tensorboard.png", None),
         "histograms.png": ("token_panel_histograms.png", (0, 0, 1400, 700))}
for source, (name, box) in crops.items():
    image = Image.open(tmp / source)
    (image.crop(box) if box else image).save(out / name, optimize=True)
    print(out / name)
EOF
