"""The token-credit report in a real browser: built from token records of a real CPU demo run, rendered by
Debian's Chromium (headless, through the React server's playwright-core), checked on the screenshot.

The records in `tests/fixtures/token_report/` were written by `make demo` (seed 0, 20 steps of 8 prompts x 4
rollouts; the `bot` and `grpo` runs record the same 4 prompts of step 20, `+algorithm.token_report_steps`),
with the runs' metrics cut to the keys the report reads. `check_token_records` (tests/harness/trainer.py) checks
that such records are exactly what verl's trainer wrote (token ids, rm_scores, advantages).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl_bot.observe.token_records import read_records
from verl_bot.observe.token_view import colour

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "token_report"
NODE_MODULES = ROOT / "reward_servers" / "react" / "node_modules"
CHROMIUM = os.environ.get("REACT_REWARD_CHROMIUM", "/usr/bin/chromium")

SCREENSHOT_JS = r"""
const fs = require('fs');
const pw = require('playwright-core');
(async () => {
  const [html, png, out, chromium] = process.argv.slice(2);
  const browser = await pw.chromium.launch({
    executablePath: chromium, headless: false, timeout: 60000,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
    await page.goto('file://' + html, { waitUntil: 'load' });
    await page.screenshot({ path: png, fullPage: true });
    const facts = await page.evaluate(() => {
      const box = (el) => {
        const r = el.getBoundingClientRect();
        return { x: r.x + scrollX, y: r.y + scrollY, w: r.width, h: r.height };
      };
      return {
        text: document.body.innerText,
        image: [...document.images].map((i) => i.naturalWidth),
        legends: [...document.querySelectorAll('.legend')].map((l) => ({
          quantity: l.dataset.quantity, scale: parseFloat(l.dataset.scale), bar: box(l.querySelector('.bar')),
          ticks: [...l.querySelectorAll('.ticks span')].map((s) => s.textContent),
        })),
        groups: [...document.querySelectorAll('.group')].map((g) => [...g.querySelectorAll('.run')].map((r) => ({
          run: r.dataset.run, heading: r.querySelector('h3').textContent,
          rollouts: [...r.querySelectorAll('.rollout')].map((ro) => ({
            key: ro.dataset.key,
            cells: [...ro.querySelectorAll('.tok')].map((t) => [...t.querySelectorAll('.cell')].map((c) => ({
              quantity: c.classList[1], value: parseFloat(c.dataset.value), box: box(c), text: c.textContent,
              bg: getComputedStyle(c).backgroundColor,
            }))),
          })),
        }))),
      };
    });
    fs.writeFileSync(out, JSON.stringify(facts));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Build the report from the fixture runs with the CLI, render it in Chromium: (facts, screenshot, scales)."""
    if not (NODE_MODULES / "playwright-core").is_dir() or not Path(CHROMIUM).exists():
        pytest.fail("the report test needs Chromium and playwright-core: run `make setup`")
    from PIL import Image

    tmp = tmp_path_factory.mktemp("token_report")
    out = tmp / "report"
    cmd = [sys.executable, "-m", "verl_bot.eval.training_report", "--out", str(out)]
    cmd += ["--run", f"bot={FIXTURE / 'bot'}", "--run", f"grpo={FIXTURE / 'grpo'}"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "tokens of step 20" in res.stdout
    script = tmp / "shot.js"
    script.write_text(SCREENSHOT_JS)
    png, facts_file = tmp / "tokens.png", tmp / "facts.json"
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    res = subprocess.run(
        ["node", str(script), str(out / "tokens.html"), str(png), str(facts_file), CHROMIUM],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    shutil.copy(png, out / "tokens.png")  # kept next to the report for a person to look at
    facts = json.loads(facts_file.read_text())
    return facts, Image.open(png).convert("RGB"), {lg["quantity"]: lg["scale"] for lg in facts["legends"]}


def _pixel(image, box) -> tuple[int, int, int]:
    """The colour just inside a cell's top-left corner (its background, away from the glyphs)."""
    return image.getpixel((int(box["x"]) + 1, int(box["y"]) + 1))


def _cells(facts, run=None, quantity=None):
    for group in facts["groups"]:
        for column in group:
            if run in (None, column["run"]):
                for rollout in column["rollouts"]:
                    for token in rollout["cells"]:
                        for cell in token:
                            if quantity in (None, cell["quantity"]):
                                yield cell


def test_legend_bars_and_both_algorithm_columns(rendered):
    facts, image, scales = rendered
    assert [lg["quantity"] for lg in facts["legends"]] == ["rewards", "advantages"]
    for lg in facts["legends"]:
        assert lg["bar"]["w"] > 200 and lg["bar"]["h"] > 5
        s = lg["scale"]
        assert lg["ticks"] == [f"{-s:+g}", f"{-s / 2:+g}", "+0", f"{s / 2:+g}", f"{s:+g}"]
        bar = lg["bar"]
        y = int(bar["y"] + bar["h"] / 2)
        left, mid, right = (image.getpixel((int(bar["x"] + f * (bar["w"] - 1)), y)) for f in (0.01, 0.5, 0.99))
        assert _close(left, colour(-s, s), 12) and _close(mid, (255, 255, 255), 12) and _close(right, colour(s, s), 12)
    assert facts["image"] and facts["image"][0] > 0  # reward.png drawn and loaded
    assert len(facts["groups"]) == 4
    for group in facts["groups"]:
        assert [c["run"] for c in group] == ["bot", "grpo"] and [c["heading"] for c in group] == ["bot", "grpo"]
        assert all(len(c["rollouts"]) == 4 for c in group)  # the same prompt's group in both runs


def test_no_replacement_character_and_every_token_of_the_records(rendered):
    facts, _, _ = rendered
    assert "\ufffd" not in facts["text"]
    for run in ("bot", "grpo"):
        records = {r["key"]: r for r in read_records(FIXTURE / run / "token_records" / "step_20.jsonl")}
        shown = [ro for group in facts["groups"] for col in group if col["run"] == run for ro in col["rollouts"]]
        assert len(shown) == 16
        for rollout in shown:
            record = records[rollout["key"]]
            assert len(rollout["cells"]) == len(record["response_ids"])
            for i, (reward, advantage) in enumerate(rollout["cells"]):
                assert reward["value"] == pytest.approx(record["rewards"][i], abs=1e-5)
                assert advantage["value"] == pytest.approx(record["advantages"][i], abs=1e-5)
                assert reward["text"] == advantage["text"] and reward["text"]
    byte_cells = [c for c in _cells(facts) if c["text"].startswith("<0x")]
    assert byte_cells, "the tiny model's random tokens include partial UTF-8 characters: shown as <0xNN>"


def test_token_colours_on_the_screenshot(rendered):
    facts, image, scales = rendered
    checked = 0
    for cell in _cells(facts):
        expected = colour(cell["value"], scales[cell["quantity"]])
        assert cell["bg"] == f"rgb({expected[0]}, {expected[1]}, {expected[2]})"
        assert _close(_pixel(image, cell["box"]), expected, 3), cell
        checked += 1
    assert checked > 500
    # by hand: the largest |A| on the page is full colour iff it reaches the scale; 0 is white
    top = max(_cells(facts, quantity="advantages"), key=lambda c: abs(c["value"]))
    assert abs(top["value"]) <= scales["advantages"]
    assert _close(_pixel(image, top["box"]), colour(top["value"], scales["advantages"]), 3)


def test_grpo_rows_by_hand(rendered):
    """verl's grpo: G as one scalar on the last token (the other rewards are 0: white), one advantage per rollout."""
    facts, image, scales = rendered
    for group in facts["groups"]:
        for rollout in next(c for c in group if c["run"] == "grpo")["rollouts"]:
            rewards = [token[0] for token in rollout["cells"]]
            advantages = [token[1] for token in rollout["cells"]]
            assert all(c["value"] == 0 and _pixel(image, c["box"]) == (255, 255, 255) for c in rewards[:-1])
            assert len({c["value"] for c in advantages}) == 1
            assert len({_pixel(image, c["box"]) for c in advantages}) == 1


def _close(a, b, tolerance: int) -> bool:
    return all(abs(x - y) <= tolerance for x, y in zip(a, b, strict=True))
