"""Pairwise VLM win rate of run A over run B on the same prompts (docs/ALGORITHMS.md "Evaluation").

The rows of the two generation files paired by ``(prompt_index, sample_index)`` (``EvalError`` when the runs were not
generated on the same prompts), every response rendered through the React reward server, the pairs where both sides
render judged 4 rounds in ABBA order (``verl_bot.eval.pairwise.judge_pair`` through
``reward_servers.common.judge.JudgeClient``), the others decided without the judge. Win rate of A = mean score over
pairs (a tie is worth 0.5); tie rate = share of pairs scored 0.5. The rules: docs/evaluation.md (``winrate``).
"""

from __future__ import annotations

import asyncio
import base64

from verl_bot.eval.pairwise import judge_pair, win_rate
from verl_bot.eval.records import EvalError
from verl_bot.eval.reward_client import score_rows_async

RENDER_OPTIONS = {"llm_judge": False, "vlm_judge": False, "lint": False, "return_screenshot": True}


def pair_runs(rows_a: list[dict], rows_b: list[dict]) -> list[tuple[dict, dict]]:
    """(row of A, row of B) per key ``(prompt_index, sample_index)``, sorted; EvalError when the runs differ."""
    a = {(int(r["prompt_index"]), int(r["sample_index"])): r for r in rows_a}
    b = {(int(r["prompt_index"]), int(r["sample_index"])): r for r in rows_b}
    if a.keys() != b.keys():
        only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        raise EvalError(
            f"runs A and B do not hold the same (prompt_index, sample_index) rows: {len(only_a)} only in A "
            f"(first {only_a[:3]}), {len(only_b)} only in B (first {only_b[:3]})"
        )
    for key in sorted(a):
        if a[key]["prompt"] != b[key]["prompt"]:
            raise EvalError(f"runs A and B have different prompts at (prompt_index, sample_index) {key}")
    return [(a[k], b[k]) for k in sorted(a)]


def screenshot(verdict: dict) -> bytes | None:
    """The PNG of a rendered response (``info.compiled`` and a screenshot), else None."""
    info = verdict.get("info") or {}
    shot = info.get("screenshot")
    if verdict.get("error") or not info.get("compiled") or not shot:
        return None
    return base64.b64decode(shot)


async def render_pairs(pairs: list[tuple[dict, dict]], url: str, **client_kwargs) -> list[tuple]:
    """(PNG of A or None, PNG of B or None) per pair, from one React-server pass over both runs."""
    rows = [row for pair in pairs for row in pair]
    shots = [screenshot(v) for v in await score_rows_async(url, rows, RENDER_OPTIONS, **client_kwargs)]
    return list(zip(shots[0::2], shots[1::2], strict=True))


def render_decision(png_a: bytes | None, png_b: bytes | None) -> float | None:
    """A's score decided without the judge when a side did not render (1, 0, or 0.5 for both), else None."""
    if png_a is None and png_b is None:
        return 0.5
    if png_a is None or png_b is None:
        return 1.0 if png_b is None else 0.0
    return None


async def judge_pairs(client, pairs: list[tuple[dict, dict]], shots: list[tuple]) -> list[dict]:
    """One record per pair: score of A, winner, ABBA round winners (None when decided by rendering)."""

    async def one(pair: tuple[dict, dict], pngs: tuple) -> dict:
        row_a, _ = pair
        decided = render_decision(*pngs)
        if decided is not None:
            score, rounds, by = decided, None, "render"
        else:
            (score, rounds), by = await judge_pair(client, row_a["prompt"], *pngs), "judge"
        return {
            "prompt_index": row_a["prompt_index"],
            "sample_index": row_a["sample_index"],
            "winner": "A" if score == 1.0 else "B" if score == 0.0 else "tie",
            "score_a": score,
            "decided_by": by,
            "rendered_a": pngs[0] is not None,
            "rendered_b": pngs[1] is not None,
            "rounds": rounds,
            "prompt": row_a["prompt"][:200],
        }

    return list(await asyncio.gather(*(one(p, s) for p, s in zip(pairs, shots, strict=True))))


async def _winrate_records(judge_config, pairs: list[tuple[dict, dict]], react_url: str, **client_kwargs):
    """Check the judge answers (before any rendering), render both runs, judge every pair."""
    from reward_servers.common.judge import JudgeClient

    async with JudgeClient(judge_config) as client:
        if not await client.ping():
            raise EvalError(f"judge endpoint {judge_config.base_url} unreachable (GET /models failed)")
        shots = await render_pairs(pairs, react_url, **client_kwargs)
        return await judge_pairs(client, pairs, shots)


def winrate(
    rows_a: list[dict],
    rows_b: list[dict],
    react_url: str,
    judge_config,
    names: tuple[str, str] = ("A", "B"),
    **client_kwargs,
) -> dict:
    """The win-rate report of A over B (see the module docstring); ``judge_config`` is a ``JudgeConfig``."""
    pairs = pair_runs(rows_a, rows_b)
    records = asyncio.run(_winrate_records(judge_config, pairs, react_url, **client_kwargs))
    rate, ties = win_rate([r["score_a"] for r in records])
    return {
        "win_rate": rate,
        "tie_rate": ties,
        "a": names[0],
        "b": names[1],
        "n_pairs": len(records),
        "wins": sum(r["winner"] == "A" for r in records),
        "ties": sum(r["winner"] == "tie" for r in records),
        "losses": sum(r["winner"] == "B" for r in records),
        "n_judged": sum(r["decided_by"] == "judge" for r in records),
        "unparseable_rounds": sum(w is None for r in records for w in (r["rounds"] or [])),
        "server": react_url,
        "judge": {"base_url": judge_config.base_url, "model": judge_config.model},
        "pairs": records,
    }
