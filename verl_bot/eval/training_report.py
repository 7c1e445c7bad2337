"""Report of CPU training runs: reward over steps (PNG) and rollouts coloured token by token (HTML).

    python -m verl_bot.eval.training_report --run bot=outputs/cpu_demo/bot --run grpo=outputs/cpu_demo/grpo \
        --tokenizer outputs/tiny_model_s0 --out outputs/cpu_demo/report

Each run directory holds what `recipes/cpu_train.sh` makes verl write:
`metrics.jsonl` (verl's file logger) and `rollouts/<step>.jsonl` (verl's
rollout dump: text, uid `{prompt}_{sample}_{output}`, summed score).

- `reward.png`: the mean global score G (`reward/score/mean`) per step of every run.
- `tokens.html`: for a few groups of the last dumped step of the first run,
  every rollout twice, each token's background coloured by its reward r_t and
  by its BoT-GRPO advantage A_t. verl dumps text, not token ids, so the text is
  re-tokenized and re-scored here with the same scorer, composition and
  estimator as in training; a rollout whose re-scored sum differs from the
  dumped one (text that does not re-tokenize to the generated ids) is marked.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
from pathlib import Path

import numpy as np
import torch

from verl_bot.advantage.bot import bot_advantage
from verl_bot.eval.figures import plot_runs
from verl_bot.eval.records import read_metric
from verl_bot.rewards.scorers import build_scorer
from verl_bot.rewards.spans import token_char_spans
from verl_bot.rewards.verdict import compose_token_rewards, local_token_values, validate_verdict


def _colour(value: float, scale: float) -> str:
    """Red for negative, green for positive, white at 0; `scale` maps to full colour."""
    x = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    fade = int(255 * (1 - abs(x)))
    return f"rgb({fade},255,{fade})" if x >= 0 else f"rgb(255,{fade},{fade})"


def _token_row(pieces: list[str], values: np.ndarray, label: str) -> str:
    scale = float(np.abs(values).max()) or 1.0
    cells = "".join(
        f'<span title="{label} {v:+.3f}" style="background:{_colour(v, scale)}">{html.escape(p) or "&#8203;"}</span>'
        for p, v in zip(pieces, values, strict=True)
    )
    return f'<div class="row"><b>{label}</b> {cells}</div>'


def score_rollouts(rollouts: list[dict], tokenizer, scorer, w_global: float, w_local: float) -> list[dict]:
    """Re-tokenize and re-score rollouts of ONE group; adds `pieces`, `rewards` (L,), `advantages` (L,)."""
    scored = []
    for rollout in rollouts:
        ids = tokenizer(rollout["output"], add_special_tokens=False)["input_ids"]
        text, spans = token_char_spans(tokenizer, ids)
        item = {"prompt": rollout["input"], "response": text, "ground_truth": rollout.get("gts"), "extra_info": {}}
        verdict = validate_verdict(asyncio.run(scorer.score(item)))
        local = local_token_values(verdict["local"], spans, len(text))
        rewards = compose_token_rewards(verdict["global"]["score"], local, w_global, w_local)
        scored.append({**rollout, "pieces": [text[s:e] for s, e in spans], "rewards": rewards})
    width = max(1, max(len(r["rewards"]) for r in scored))
    padded = torch.zeros(len(scored), width, dtype=torch.float64)
    mask = torch.zeros(len(scored), width)
    for i, r in enumerate(scored):
        padded[i, : len(r["rewards"])] = torch.as_tensor(r["rewards"])
        mask[i, : len(r["rewards"])] = 1
    advantages = bot_advantage(padded, mask, np.zeros(len(scored)))
    for i, r in enumerate(scored):
        r["advantages"] = advantages[i, : len(r["rewards"])].numpy()
    return scored


def token_html(run_dir: Path, tokenizer, scorer, w_global: float, w_local: float, groups: int = 2) -> str:
    """HTML body: the first `groups` groups of the last dumped step, token by token."""
    dumps = sorted((run_dir / "rollouts").glob("*.jsonl"), key=lambda p: int(p.stem))
    if not dumps:
        return "<p>no rollout dump found</p>"
    rollouts = [json.loads(line) for line in dumps[-1].read_text().splitlines()]
    by_group: dict[str, list[dict]] = {}
    for r in rollouts:
        by_group.setdefault(str(r["uid"]).rsplit("_", 2)[0], []).append(r)
    parts = [f"<h2>{html.escape(run_dir.name)}: step {dumps[-1].stem}</h2>"]
    for uid, group in list(by_group.items())[:groups]:
        parts.append(f"<h3>prompt {html.escape(uid[:8])}: {html.escape(group[0]['input'])}</h3>")
        for r in score_rollouts(group, tokenizer, scorer, w_global, w_local):
            exact = abs(float(np.sum(r["rewards"])) - float(r["score"])) < 1e-3 * max(1.0, abs(float(r["score"])))
            note = "" if exact else " <i>(re-tokenized text: differs from the generated ids)</i>"
            parts.append(f'<div class="rollout">sum of rewards {float(r["score"]):+.3f}{note}')
            parts.append(_token_row(r["pieces"], r["rewards"], "reward"))
            parts.append(_token_row(r["pieces"], r["advantages"], "advantage"))
            parts.append("</div>")
    return "\n".join(parts)


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>verl-bot CPU demo</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}} .row{{font-family:monospace;
white-space:pre-wrap;margin:2px 0}} .rollout{{border-top:1px solid #ddd;padding:4px 0}} span{{padding:0 1px}}</style>
</head><body><h1>verl-bot CPU demo</h1><p>Mean global score per step (all runs):</p><img src="reward.png">
<p>Token colours: green positive, red negative, white 0 (scaled per row). Hover a token for its value.</p>
{body}</body></html>"""


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR (repeat; the first is coloured)")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--scorer", default="builtin:toy_lint")
    parser.add_argument("--w-global", type=float, default=1.0)
    parser.add_argument("--w-local", type=float, default=0.5)
    args = parser.parse_args()

    runs = dict(item.split("=", 1) for item in args.run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curves = {name: read_metric(Path(d) / "metrics.jsonl") for name, d in runs.items()}
    plot_runs(curves, out / "reward.png", "toy_lint on CPU: " + " vs ".join(runs))
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    first = Path(next(iter(runs.values())))
    body = token_html(first, tokenizer, build_scorer(args.scorer), args.w_global, args.w_local)
    (out / "tokens.html").write_text(PAGE.format(body=body))
    for name, (steps, values) in curves.items():
        last = f"{values[-1]:+.3f} at step {steps[-1]}" if steps else "no steps logged"
        print(f"{name}: mean G {values[0]:+.3f} at step {steps[0]} -> {last}" if steps else f"{name}: {last}")
    print(f"report: {out / 'reward.png'} and {out / 'tokens.html'}")


if __name__ == "__main__":
    main()
