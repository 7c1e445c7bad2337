"""React compile rate of generated responses, scored by the React reward server.

"Compiled" is the server's ``info.compiled`` (reward_servers/react/README.md, "Pipeline and verdicts" 5):
the extracted component bundled with esbuild (allow-listed imports, valid syntax, an export) AND rendered in
Chromium without a runtime error or time-out. A response with no React component, or an item the server could
not score (``error`` set), counts as not compiled. The compile rate is the share of compiled items over all
rows (every sample of every prompt). Judges are switched off per call (``llm_judge``/``vlm_judge`` false), so
no judge endpoint is needed and the verdict does not depend on one.
"""

from __future__ import annotations

from verl_bot.eval.reward_client import score_rows

REACT_OPTIONS = {"llm_judge": False, "vlm_judge": False, "return_screenshot": False}


def item_verdict(row: dict, verdict: dict) -> dict:
    """The per-item record of the report: keys of the row, compiled/rendered/bundled, G, flags, first problem."""
    info = verdict.get("info") or {}
    problems = [d.get("message", "") for d in info.get("diagnostics") or []] + list(info.get("runtime_errors") or [])
    return {
        "prompt_index": row["prompt_index"],
        "sample_index": row["sample_index"],
        "compiled": bool(info.get("compiled")) and not verdict.get("error"),
        "bundled": bool(info.get("bundled")),
        "rendered": bool(info.get("rendered")),
        "score": (verdict.get("global") or {}).get("score"),
        "flags": verdict.get("flags") or [],
        "error": verdict.get("error"),
        "problem": str(problems[0])[:300] if problems else None,
    }


def compile_report(rows: list[dict], verdicts: list[dict]) -> dict:
    """``{"compile_rate", "n_items", "n_compiled", "n_prompts", "n_errors", "items": [...]}`` from verdicts."""
    items = [item_verdict(r, v) for r, v in zip(rows, verdicts, strict=True)]
    n_compiled = sum(i["compiled"] for i in items)
    return {
        "compile_rate": n_compiled / len(items),
        "n_items": len(items),
        "n_compiled": n_compiled,
        "n_prompts": len({r["prompt_index"] for r in rows}),
        "n_errors": sum(i["error"] is not None for i in items),
        "items": items,
    }


def compile_rate(rows: list[dict], url: str, **client_kwargs) -> dict:
    """Score ``rows`` through the React reward server at ``url`` and build :func:`compile_report`."""
    verdicts = score_rows(url, rows, REACT_OPTIONS, **client_kwargs)
    report = compile_report(rows, verdicts)
    report["server"] = url
    return report
