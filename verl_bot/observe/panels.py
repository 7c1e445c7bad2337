"""The token-credit panel and the per-token histograms that a verl-bot run sends to verl's experiment trackers.

Pure logic (no verl, no tracker imported): which steps are logged, which rollouts a panel shows, the panel as HTML
(wandb) and as Markdown (TensorBoard's text dashboard), the histograms of r_t, A_t and S_t (recovered as
(r_t - w_g * G) / w_s, clipped as the manager clips it), and the knobs (`PanelSettings`, `+algorithm.token_panel_*`).
The panel is the offline report's token view (`verl_bot.eval.training_report`: the same colours, the same symmetric
scale per quantity, `nice_scale` of the largest |value| shown) of a few rollouts' token records. The tracker calls
and the reads that feed them: `verl_bot.hooks.v1.tracker_panel`, `verl_bot.training.panel`. Explained in
docs/evaluation.md, section Token credit in your experiment tracker.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping, Sequence

import numpy as np

from verl_bot.knobs import MethodSettings, knob
from verl_bot.observe.token_records import chosen_groups
from verl_bot.observe.token_view import (
    NEGATIVE,
    POSITIVE,
    QUANTITIES,
    STYLE,
    legends_html,
    rollout_html,
    shown_tokens,
    token_scales,
    token_segments,
)

PANEL_KEY = "verl_bot/token_credit"  # the panel's name in every tracker
HISTOGRAM_KEYS = {"rewards": "verl_bot/r_t", "local": "verl_bot/S_t", "advantages": "verl_bot/A_t"}
HISTOGRAM_BINS = 64
SQUARES = 4  # the text panel's squares at full scale
_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_{}[]()#+-.!|~>"} | {"<": "&lt;", "&": "&amp;"})


# ---------------------------------------------------------------------------------------------- knobs
@dataclasses.dataclass(frozen=True)
class PanelSettings(MethodSettings, prefix="token_panel_", label="token panel"):
    """When a panel is sent (`logged_step`), how many rollouts it shows (`chosen_rows`), how many of their tokens."""

    every: int = knob(10, bounds="[0, inf)", source="ours", doc="a panel at step 1, every N-th and the last; 0: never")
    rollouts: int = knob(4, bounds="[1, inf)", source="ours", doc="rollouts per panel, whole groups first")
    tokens: int = knob(256, bounds="[0, inf)", source="ours", doc="tokens shown per rollout; 0: all")


def logged_step(step: int, total_steps: int, every: int) -> bool:
    """True at the steps that send a panel: step 1, every `every`-th and the last (`total_steps`); never for 0."""
    return every > 0 and (step == 1 or step % every == 0 or step == total_steps)


# ------------------------------------------------------------------------------------------- rollouts
def chosen_rows(uids: Sequence[str], prompts: Sequence[str], rollouts: int) -> list[int]:
    """Row indexes of a panel's rollouts: the groups in the order of `token_records.chosen_groups` (smallest
    prompt text first), all rollouts of each in row order, until `rollouts` rows."""
    order = {uid: n for n, uid in enumerate(chosen_groups(uids, prompts, 0))}
    ranked = sorted(range(len(uids)), key=lambda i: (order[uids[i]], i))
    return ranked[:rollouts]


def _groups(records: Sequence[dict]) -> list[list[dict]]:
    """The records grouped by uid, in their order (token records are sorted by prompt, uid, key)."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(record["uid"], []).append(record)
    return list(groups.values())


# ------------------------------------------------------------------------------------------ the panel
PANEL_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>verl-bot token credit</title>
<style>
{style}body{{margin:.5em;max-width:none}}</style></head><body>
{body}</body></html>"""


def panel_html(step: int, estimator: str, records: Sequence[dict], tokens: int) -> str:
    """The panel as a page of its own (wandb shows it in a frame): the offline report's token view of `records`
    (the step's token records of the rollouts shown), `shown_tokens(length, tokens)` tokens of each."""
    scales = token_scales(records)
    parts = [
        f"<h3>Token credit at step {step} ({html.escape(estimator)})</h3>" + legends_html(scales),
        '<p class="facts">Each token: top cell its reward r<sub>t</sub>, bottom cell its advantage A<sub>t</sub>, '
        "on the scales above (the offline report's). Hover a token for its id and values.</p>",
    ]
    for group in _groups(records):
        parts.append(f'<section class="group"><div class="prompt">{html.escape(group[0]["prompt"])}</div>')
        parts.extend(rollout_html(record, scales, tokens) for record in group)
        parts.append("</section>")
    return PANEL_PAGE.format(style=STYLE, body="\n".join(parts))


def squares(value: float, scale: float) -> str:
    """The text panel's colour of a value: up to SQUARES squares, blue above 0 and red below as the report's
    POSITIVE and NEGATIVE, one per quarter of `scale` (rounded; none for |value| < scale / 8)."""
    t = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    return ("\U0001f7e6" if t > 0 else "\U0001f7e5") * round(abs(t) * SQUARES)


def markdown_escape(text: str) -> str:
    """`text` as literal Markdown inside a table cell (TensorBoard's text dashboard renders Markdown)."""
    return text.translate(_MARKDOWN_SPECIAL)


def token_text(record: dict, i: int) -> str:
    """Token i of a record as the report shows it (special tokens by name, `<0xNN>`, `·` for a space...)."""
    return "".join(text for text, _ in token_segments(record, i))


def _rollout_markdown(n: int, record: dict, scales: dict[str, float], tokens: int) -> list[str]:
    info = record.get("info") or {}
    length = len(record["response_ids"])
    shown = shown_tokens(length, tokens)
    facts = [f"**rollout {n}**", f"`{record['key']}`"]
    facts += [f"G {info['score']:+.3f}"] if "score" in info else []
    facts += [f"solved {info['acc']:g}"] if "acc" in info else []
    facts += ["scorer failed: advantage 0"] if info.get("scorer_failed") else []
    facts.append(f"{length} tokens" + (f" ({len(shown)} shown)" if len(shown) < length else ""))
    lines = ["", " · ".join(facts), "", "| # | token | id | r_t | | A_t | |", "|--:|:--|--:|--:|:--|--:|:--|"]
    last = -1
    for i in shown:
        if i > last + 1:
            lines.append(f"| … | *{i - last - 1} tokens* | | | | | |")
        values = [float(record[key][i]) for key, _ in QUANTITIES]
        cells = [f"{v:+.6g} | {squares(v, scales[key])}" for v, (key, _) in zip(values, QUANTITIES, strict=True)]
        lines.append(f"| {i} | {markdown_escape(token_text(record, i))} | {record['response_ids'][i]} | "
                     + " | ".join(cells) + " |")
        last = i
    return lines


def panel_markdown(step: int, estimator: str, records: Sequence[dict], tokens: int) -> str:
    """The panel as Markdown for a tracker without HTML (TensorBoard's text dashboard): per rollout a table of its
    shown tokens (position, text as the report shows it, id, r_t and A_t with their colour in squares)."""
    scales = token_scales(records)
    blue, red = (f"rgb{colour}" for colour in (POSITIVE, NEGATIVE))
    lines = [
        f"### Token credit at step {step} ({markdown_escape(estimator)})",
        "",
        f"Scales (the offline report's): r_t ±{scales['rewards']:g}, A_t ±{scales['advantages']:g}; "
        f"\U0001f7e6 above 0 ({blue} in the report), \U0001f7e5 below ({red}), one square per quarter of the scale.",
    ]
    n = 0
    for group in _groups(records):
        lines += ["", "---", "", f"**prompt:** {markdown_escape(group[0]['prompt'])}"]
        for record in group:
            n += 1
            lines += _rollout_markdown(n, record, scales, tokens)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- histograms
@dataclasses.dataclass(frozen=True)
class Histogram:
    """A histogram of N values: `counts` (bins,) int64 over `edges` (bins + 1,) float64, and the values' count,
    sum, sum of squares, min and max (what TensorBoard's raw histograms carry)."""

    counts: np.ndarray
    edges: np.ndarray
    num: int
    total: float
    total_squares: float
    low: float
    high: float


def histogram(values: np.ndarray, bins: int = HISTOGRAM_BINS) -> Histogram | None:
    """`bins` equal bins from the least to the largest finite value of `values` (any shape; NaN and inf left
    out); None when there is none."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return None
    counts, edges = np.histogram(flat, bins=bins)
    return Histogram(counts.astype(np.int64), edges, int(flat.size), float(flat.sum()), float(np.dot(flat, flat)),
                     float(flat.min()), float(flat.max()))


def local_signal(rewards: np.ndarray, scores: np.ndarray, lengths: np.ndarray, w_global: float,
                 w_local: float) -> np.ndarray:
    """S_t of every token from the `bot` manager's dense rewards `r_t = w_g * G + w_s * S_t`.

    Args:
        rewards: (N,) the token rewards of B rollouts, concatenated. scores: (B,) each rollout's G.
        lengths: (B,) each rollout's token count (sum N). w_global, w_local: the manager's w_g, w_s (w_s != 0).

    Returns:
        (N,) float64 S_t.
    """
    repeated = np.repeat(np.asarray(scores, dtype=np.float64), np.asarray(lengths, dtype=np.int64))
    return (np.asarray(rewards, dtype=np.float64) - w_global * repeated) / w_local


def local_signal_returns(rewards: np.ndarray, scores: np.ndarray, lengths: np.ndarray, w_global: float,
                         w_local: float) -> np.ndarray:
    """S_t of every token from the `bot` manager's `returns` layout: `r_t = w_s * S_t`, plus `w_g * G` on each
    rollout's last token.

    Args:
        rewards: (N,) the token rewards of B rollouts, concatenated. scores: (B,) each rollout's G.
        lengths: (B,) each rollout's token count (sum N). w_global, w_local: the manager's w_g, w_s (w_s != 0).

    Returns:
        (N,) float64 S_t.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    on_last = np.zeros(int(lengths.sum()), dtype=np.float64)
    ends = np.cumsum(lengths)[lengths > 0] - 1
    on_last[ends] = w_global * np.asarray(scores, dtype=np.float64)[lengths > 0]
    return (np.asarray(rewards, dtype=np.float64) - on_last) / w_local


def step_histograms(values: Mapping[str, np.ndarray], bins: int = HISTOGRAM_BINS) -> dict[str, Histogram]:
    """{tracker key: histogram} of a step's token values {"rewards"|"local"|"advantages": (N,)}, those with any."""
    out = {HISTOGRAM_KEYS[name]: histogram(array, bins) for name, array in values.items()}
    return {key: value for key, value in out.items() if value is not None}

