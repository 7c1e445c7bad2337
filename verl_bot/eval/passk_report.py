"""AIME pass@k of generated responses, scored by the math reward server (``info.correct``).

Rows are grouped by ``prompt_index`` (n samples per problem); each sample is correct when the server's verdict
says ``info.correct`` (the answer check only: the step judge is switched off per call with ``judge`` false).
An item the server refuses (no ground truth, ``error`` set) counts as incorrect and is counted in ``n_errors``.
pass@k is the unbiased estimator of ``verl_bot.eval.passk`` averaged over problems; a k larger than the smallest
sample count of a problem is left out (listed in ``skipped_k``).
"""

from __future__ import annotations

from collections.abc import Sequence

from verl_bot.eval.passk import pass_at_k_from_results
from verl_bot.eval.records import group_by_prompt
from verl_bot.eval.reward_client import score_rows

MATH_OPTIONS = {"judge": False}


def passk_report(rows: list[dict], verdicts: list[dict], ks: Sequence[int] = (1, 2, 4)) -> dict:
    """``{"pass@k": {...}, "ks", "skipped_k", "n_problems", "n_samples", "n_errors", "problems": [...]}``."""
    correct = {
        (r["prompt_index"], r["sample_index"]): bool((v.get("info") or {}).get("correct")) and not v.get("error")
        for r, v in zip(rows, verdicts, strict=True)
    }
    groups = group_by_prompt(rows)
    results = [[correct[(p, r["sample_index"])] for r in group] for p, group in groups.items()]
    table = pass_at_k_from_results(results, ks)
    return {
        "pass@k": table,
        "ks": [int(k) for k in ks if f"pass@{k}" in table],
        "skipped_k": [int(k) for k in ks if f"pass@{k}" not in table],
        "n_problems": len(groups),
        "n_samples": len(rows),
        "n_errors": sum(bool(v.get("error")) for v in verdicts),
        "problems": [
            {"prompt_index": p, "n": len(res), "correct": sum(res), "ground_truth": groups[p][0]["ground_truth"]}
            for p, res in zip(groups, results, strict=True)
        ],
    }


def passk(rows: list[dict], url: str, ks: Sequence[int] = (1, 2, 4), **client_kwargs) -> dict:
    """Score ``rows`` through the math reward server at ``url`` and build :func:`passk_report`."""
    report = passk_report(rows, score_rows(url, rows, MATH_OPTIONS, **client_kwargs), ks)
    report["server"] = url
    return report
