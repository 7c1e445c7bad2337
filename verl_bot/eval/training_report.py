"""Report of training runs: reward over steps (PNG) and the token credit of recorded steps (HTML).

    python -m verl_bot.eval.training_report --run bot=outputs/cpu_demo/bot --run grpo=outputs/cpu_demo/grpo \
        --out outputs/cpu_demo/report [--step 20] [--groups 4]

Each run directory holds what a run with `+algorithm.token_report_steps=[...]` writes
(`verl_bot/observe/token_records.py`): `token_records/step_<N>.jsonl` (or `ckpt/token_records/`, the default
folder), plus `metrics.jsonl` from verl's file logger.

- `reward.png`: the mean global score G (`reward/score/mean`) per step of every run.
- `tokens.html`: for the chosen step (default: the last step every run recorded), the recorded groups,
  matched across runs by their prompt text and shown side by side (one column per run). Every rollout
  shows its tokens exactly as generated (the bytes of the tokenizer's piece for each recorded id; nothing
  is re-tokenized), each token twice: coloured by its reward r_t (`rm_scores`) and by the advantage A_t
  the actor trained on. One symmetric colour scale per quantity for the whole page (every row, every run),
  drawn as a legend bar; hover a token for its id, bytes and values.

Bytes that are not printable text are shown legibly: `<0xE2>` for a byte that is not a whole UTF-8
character (the first bytes of a multi-byte character split across tokens), `·` a space, `↵` a newline,
`→` a tab, ASCII control characters as `<0x07>` (in a solid box), other invisible characters as
`<U+200B>`; special tokens by their name in a box.
"""

from __future__ import annotations

import argparse
import html
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from verl_bot.eval.records import EvalError
from verl_bot.observe.token_records import read_records, recorded_files

POSITIVE = (33, 102, 172)  # full colour at +scale (blue)
NEGATIVE = (178, 24, 43)  # full colour at -scale (red)
QUANTITIES = (("rewards", "reward r_t"), ("advantages", "advantage A_t"))
_WHITESPACE = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192"}


# ------------------------------------------------------------------------------------------- tokens
def _one_char(raw: bytes, i: int) -> str | None:
    """The UTF-8 character that starts at byte i of raw, or None when raw[i] starts no complete character."""
    for n in range(1, 5):
        try:
            text = raw[i : i + n].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if len(text) == 1 else None
    return None


def display_segments(raw: bytes) -> list[tuple[str, str]]:
    """What a token's bytes look like on the page: [(text, kind)], kind in text/space/byte/control.

    Whole UTF-8 characters are text (spaces, newlines, tabs as visible markers, kind `space`); a byte that
    is no whole character is `<0xNN>` (kind `byte`); an ASCII control character `<0xNN>` too and any other
    character Python does not call printable `<U+NNNN>` (kind `control`, boxed differently). Consecutive
    text is merged. Only ASCII and the marker characters are used for what is not text, so every font
    shows them.
    """
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(raw):
        ch = _one_char(raw, i)
        if ch is None:
            seg, i = (f"<0x{raw[i]:02X}>", "byte"), i + 1
        else:
            i += len(ch.encode("utf-8"))
            if ch in _WHITESPACE:
                seg = (_WHITESPACE[ch], "space")
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                seg = (f"<0x{ord(ch):02X}>", "control")
            elif not ch.isprintable():
                seg = (f"<U+{ord(ch):04X}>", "control")
            else:
                seg = (ch, "text")
        if out and seg[1] == "text" and out[-1][1] == "text":
            out[-1] = (out[-1][0] + seg[0], "text")
        else:
            out.append(seg)
    return out


# ------------------------------------------------------------------------------------------- colours
def colour(value: float, scale: float) -> tuple[int, int, int]:
    """White at 0, linearly to POSITIVE at +scale and NEGATIVE at -scale (clipped beyond)."""
    t = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    end = POSITIVE if t >= 0 else NEGATIVE
    return tuple(round(255 + abs(t) * (c - 255)) for c in end)


NICE = (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def nice_scale(largest: float) -> float:
    """The smallest of NICE x 10^k that is >= largest (> 0), for round legend ticks; 1 for 0."""
    if not largest > 0 or not math.isfinite(largest):
        return 1.0
    base = 10 ** math.floor(math.log10(largest))
    return next(m * base for m in NICE if m * base >= largest * (1 - 1e-12))


def _css(rgb: tuple[int, int, int]) -> str:
    return f"rgb({rgb[0]},{rgb[1]},{rgb[2]})"


def legend(key: str, label: str, scale: float) -> str:
    """A colour bar from -scale to +scale with five tick labels."""
    ticks = "".join(f"<span>{v:+g}</span>" for v in (-scale, -scale / 2, 0.0, scale / 2, scale))
    return (
        f'<div class="legend" data-quantity="{key}" data-scale="{scale:g}"><b>{label}</b>'
        f'<div class="bar" style="background:linear-gradient(to right,{_css(NEGATIVE)},rgb(255,255,255),'
        f'{_css(POSITIVE)})"></div><div class="ticks">{ticks}</div></div>'
    )


def legends_html(scales: dict[str, float]) -> str:
    """The legend bars of every quantity (QUANTITIES), side by side."""
    return '<div class="legends">' + "".join(legend(key, label, scales[key]) for key, label in QUANTITIES) + "</div>"


def token_scales(records: Iterable[dict]) -> dict[str, float]:
    """One symmetric colour scale per quantity (QUANTITIES) for every token of `records`: `nice_scale` of the
    largest |value|, so the extreme token is (nearly) full colour and the legend's ticks are round."""
    largest = dict.fromkeys((key for key, _ in QUANTITIES), 0.0)
    for record in records:
        for key in largest:
            largest[key] = max(largest[key], max((abs(v) for v in record[key]), default=0.0))
    return {key: nice_scale(value) for key, value in largest.items()}


# ------------------------------------------------------------------------------------------- records
def run_records_dir(run_dir: Path) -> Path:
    """`RUN/token_records`, else `RUN/ckpt/token_records` (the default of `algorithm.token_report_dir`)."""
    for folder in (run_dir / "token_records", run_dir / "ckpt" / "token_records", run_dir):
        if recorded_files(folder):
            return folder
    raise EvalError(
        f"{run_dir}: no token records (train with +algorithm.token_report_steps=[...]; "
        "see verl_bot/observe/token_records.py)"
    )


def load_step(runs: dict[str, Path], step: int | None) -> tuple[int, dict[str, list[dict]]]:
    """The step to show (default: the last one every run recorded) and each run's records of it."""
    files = {name: recorded_files(run_records_dir(d)) for name, d in runs.items()}
    common = set.intersection(*(set(f) for f in files.values()))
    if step is None:
        if not common:
            recorded = ", ".join(f"{n} {sorted(f)}" for n, f in files.items())
            raise EvalError(f"the runs recorded no common step: {recorded}")
        step = max(common)
    missing = [name for name, f in files.items() if step not in f]
    if missing:
        raise EvalError(f"step {step} not recorded by {', '.join(missing)}")
    return step, {name: read_records(f[step]) for name, f in files.items()}


def match_groups(
    records: dict[str, list[dict]], groups: int
) -> list[tuple[tuple[str, int], dict[str, list[dict]]]]:
    """[((prompt, n), {run: rollouts})]: groups every run recorded first, then the rest; `groups` of them (0: all).

    A run's group is the rollouts sharing a uid. Runs are matched by prompt text (the uids differ between runs);
    when a step holds several groups of the same prompt, the n-th of one run is matched with the n-th of the other.
    """
    by_prompt: dict[tuple[str, int], dict[str, list[dict]]] = {}
    for name, rows in records.items():
        by_uid: dict[str, list[dict]] = {}
        for row in rows:
            by_uid.setdefault(row["uid"], []).append(row)
        seen: dict[str, int] = {}
        for rollouts in by_uid.values():
            prompt = rollouts[0]["prompt"]
            n = seen[prompt] = seen.get(prompt, -1) + 1
            by_prompt.setdefault((prompt, n), {})[name] = rollouts
    ordered = sorted(by_prompt.items(), key=lambda kv: (len(kv[1]) < len(records), kv[0]))
    return ordered[: groups if groups > 0 else None]


# ------------------------------------------------------------------------------------------- html
def token_segments(record: dict, i: int) -> list[tuple[str, str]]:
    """How token i of a record shows: a special token by its name (kind `special`), any other by
    `display_segments` of its bytes."""
    raw = bytes.fromhex(record["token_bytes"][i])
    return [(raw.decode("utf-8", "replace"), "special")] if record["special"][i] else display_segments(raw)


def _token(i: int, record: dict, scales: dict[str, float]) -> str:
    raw = bytes.fromhex(record["token_bytes"][i])
    segments = token_segments(record, i)
    inner = "".join(f'<span class="{kind}">{html.escape(text)}</span>' for text, kind in segments) or "&#8203;"
    values = {key: float(record[key][i]) for key, _ in QUANTITIES}
    title = (
        f"#{i} id {record['response_ids'][i]} bytes {raw.hex(' ').upper() or '-'}"
        f" | r {values['rewards']:+.4f} | A {values['advantages']:+.4f}"
    )
    cells = []
    for key, _ in QUANTITIES:
        rgb = colour(values[key], scales[key])
        ink = "#fff" if sum(rgb) < 380 else "#000"
        cells.append(
            f'<span class="cell {key}" data-value="{values[key]:.6g}" style="background:{_css(rgb)};color:{ink}">'
            f"{inner}</span>"
        )
    return f'<span class="tok" title="{html.escape(title)}">{"".join(cells)}</span>'


def shown_tokens(length: int, limit: int) -> list[int]:
    """The token positions shown of a rollout of `length` tokens: all of them, or with `limit` > 0 and a longer
    rollout its first ceil(limit / 2) and last floor(limit / 2) tokens (the start and the answer)."""
    if limit <= 0 or length <= limit:
        return list(range(length))
    return [*range((limit + 1) // 2), *range(length - limit // 2, length)]


def rollout_html(record: dict, scales: dict[str, float], limit: int = 0) -> str:
    """One rollout: its facts (G, solved, failure, length) and its tokens, `shown_tokens(length, limit)` of them
    (a gap marker where tokens are left out), each coloured on `scales`."""
    info = record.get("info") or {}
    length = len(record["response_ids"])
    shown = shown_tokens(length, limit)
    facts = [f"G {info['score']:+.3f}" if "score" in info else None]
    facts.append(f"solved {info['acc']:g}" if "acc" in info else None)
    facts.append("scorer failed: advantage 0" if info.get("scorer_failed") else None)
    facts.append(f"{length} tokens" + (f" ({len(shown)} shown)" if len(shown) < length else ""))
    tokens, last = [], -1
    for i in shown:
        if i > last + 1:
            tokens.append(f'<span class="gap" data-omitted="{i - last - 1}">\u2026 {i - last - 1} tokens \u2026</span>')
        tokens.append(_token(i, record, scales))
        last = i
    head = " · ".join(f for f in facts if f)
    return (f'<div class="rollout" data-key="{html.escape(record["key"])}"><div class="facts">{head}</div>'
            f'{"".join(tokens)}</div>')


def tokens_html(step: int, records: dict[str, list[dict]], groups: int) -> str:
    """The HTML body of the token view (its legends carry each quantity's colour scale)."""
    matched = match_groups(records, groups)
    scales = token_scales(row for _, runs in matched for rows in runs.values() for row in rows)
    names = list(records)
    parts = [
        f"<h2>Token credit at step {step}</h2>" + legends_html(scales),
        "<p>Each token: top cell coloured by its reward r<sub>t</sub>, bottom cell by its advantage "
        "A<sub>t</sub>, on the scales above (the same for every row and run). Hover a token for its values. "
        "Groups are matched across runs by their prompt.</p>",
    ]
    columns = f"grid-template-columns:repeat({len(names)},minmax(0,1fr))"
    for (prompt, n), runs in matched:
        again = f" <i>(group {n + 1} of this prompt in the step)</i>" if n else ""
        parts.append(f'<section class="group"><div class="prompt">{html.escape(prompt)}{again}</div>')
        parts.append(f'<div class="runs" style="{columns}">')
        for name in names:
            body = "".join(rollout_html(r, scales) for r in runs.get(name, []))
            body = body or "<p><i>this prompt was not recorded in this run</i></p>"
            parts.append(f'<div class="run" data-run="{html.escape(name)}"><h3>{html.escape(name)}</h3>{body}</div>')
        parts.append("</div></section>")
    return "\n".join(parts)


STYLE = """body{font-family:sans-serif;margin:1.5em auto;max-width:1500px;padding:0 1em}
.legends{display:flex;gap:3em;margin:.5em 0} .legend .bar{width:320px;height:14px;border:1px solid #888}
.legend .ticks{width:320px;display:flex;justify-content:space-between;font-size:12px}
.group{border-top:2px solid #ccc;margin-top:1em} .prompt{font-family:monospace;white-space:pre-wrap;
background:#f4f4f4;padding:4px;margin:6px 0} .runs{display:grid;gap:1.5em} .run h3{margin:.3em 0}
.rollout{border-top:1px solid #ddd;padding:4px 0} .facts{font-size:12px;color:#444}
.tok{display:inline-flex;flex-direction:column;margin:1px 1px 2px 0;vertical-align:top}
.cell{font-family:monospace;font-size:13px;padding:1px 2px;white-space:pre;line-height:16px;min-width:6px}
.space{opacity:.75} .byte{font-size:10px;border:1px dotted currentColor}
.control{font-size:10px;border:1px solid currentColor}
.special{font-size:10px;border:1px solid currentColor;border-radius:3px}
.gap{font-size:11px;color:#666;font-style:italic;margin:0 4px}
"""
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>verl-bot training report</title>
<style>
{style}</style></head><body><h1>verl-bot training report</h1><p>Mean global score G per step:</p>{plot}
{body}</body></html>"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR (repeat: one column each)")
    parser.add_argument("--out", required=True, help="folder for reward.png and tokens.html")
    parser.add_argument("--step", type=int, default=None, help="recorded step to show (default: the last common)")
    parser.add_argument("--groups", type=int, default=4, help="groups (prompts) to show; 0 = all (default 4)")
    args = parser.parse_args(argv)

    try:
        runs = {name: Path(d) for name, _, d in (item.partition("=") for item in args.run)}
        if any(not name or not str(d) for name, d in runs.items()):
            raise EvalError("--run takes NAME=RUN_DIR")
        step, records = load_step(runs, args.step)
        body = tokens_html(step, records, args.groups)
    except (EvalError, ValueError, OSError) as e:
        print(f"error: {e}", flush=True)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot, summary = _reward_plot(runs, out / "reward.png")
    (out / "tokens.html").write_text(PAGE.format(style=STYLE, plot=plot, body=body), encoding="utf-8")
    for line in summary:
        print(line)
    print(f"report: {out / 'reward.png'} and {out / 'tokens.html'} (tokens of step {step})")
    return 0


def _reward_plot(runs: dict[str, Path], png: Path) -> tuple[str, list[str]]:
    """Draw reward.png from the runs' metrics (runs without metrics are left out); (img tag, summary lines)."""
    from verl_bot.eval.figures import plot_runs
    from verl_bot.eval.records import read_metric

    curves, summary = {}, []
    for name, d in runs.items():
        steps, values = read_metric(d / "metrics.jsonl") if (d / "metrics.jsonl").is_file() else ([], [])
        if steps:
            curves[name] = (steps, values)
            first, last = f"{values[0]:+.3f} at step {steps[0]}", f"{values[-1]:+.3f} at step {steps[-1]}"
            summary.append(f"{name}: mean G {first} -> {last}")
        else:
            summary.append(f"{name}: no metrics.jsonl with reward/score/mean")
    if not curves:
        return "<p><i>no metrics</i></p>", summary
    plot_runs(curves, png, " vs ".join(curves) + ": mean G per step")
    return f'<img src="{png.name}" alt="mean G per step">', summary


if __name__ == "__main__":
    raise SystemExit(main())
