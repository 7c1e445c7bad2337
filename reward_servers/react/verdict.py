"""The React verdict of one response, a pure function of the facts the server gathered (`react_verdict`).

G is the sum of the parts `compile`, `eslint`, `llm_judge`, `vlm_judge`, and the local signal of line m is
S(m) = sum over penalised lines l of p_l * phi(|m - l|) (`scoring.spread`): -1 on each line a bundling diagnostic or
a runtime error's innermost frame points at, each ESLint finding's weight on its line, the judges' worst lines
ranked; a response without a component gets not_component_score, one cut off inside its think block
think_truncated_score. The facts (the extraction and think split, `Built`, `Rendered`, the judges' answers) are
gathered by `reward_servers.react.server`. The parts and constants: docs/ALGORITHMS.md, section 3 (React rewards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reward_servers.common.service import ItemResult
from verl_bot_contract.think import ThinkSplit, think_spans

from . import scoring
from .config import ReactConfig, impacts
from .extract import Extraction

LINT_KEYS = ("line", "column", "rule", "severity", "message")
RENDER_KEYS = ("blocked_requests", "blocked_urls", "elements", "text_chars", "ms", "timed_out")


@dataclass(frozen=True)
class Built:
    """The compile worker's answer: the bundle (``ok``, ``diagnostics``, ``js``, ...), the ESLint findings and
    the flags of getting them (``compile_timeout``, ``lint_failed``, ...)."""

    bundle: dict
    lint: list[dict]
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rendered:
    """The render worker's answer (``ok``, ``runtime_errors``, ``runtime_error_lines``, ``screenshot``, ...) and
    the flags of getting it (``render_timeout``, ``render_retried``, ...)."""

    page: dict
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReactFacts:
    """Everything the verdict of one response depends on.

    built: None when nothing was compiled (no component, or cut off in its think block). rendered: None when
    nothing was rendered (not bundled, or rendering off). llm, vlm: the judges' answers (``status``, ``score``,
    lines), None when the judge did not run; use_vlm: the VLM judge is on (a component without a screenshot then
    gets vlm_failure_score)."""

    extraction: Extraction
    think: ThinkSplit
    built: Built | None = None
    rendered: Rendered | None = None
    llm: dict | None = None
    vlm: dict | None = None
    use_vlm: bool = False


def base_info(facts: ReactFacts) -> dict[str, Any]:
    """The info of every verdict: where the code is, the think split, the extraction; nothing compiled yet."""
    ex = facts.extraction
    return {
        "code_start": ex.start, "code_end": ex.end, "compiled": False, "rendered": False, "bundled": False,
        "diagnostics": [], "lint": [], "runtime_errors": [], "judge": {}, "think": facts.think.info(),
        "extraction": {"source": ex.source, "lang": ex.lang, "blocks": ex.blocks, "notes": ex.notes},
    }


def react_verdict(facts: ReactFacts, cfg: ReactConfig) -> ItemResult:
    """The verdict of one response's ``facts`` under ``cfg`` (module docstring); the think block's own local
    signal (``think_local``) on top."""
    info = base_info(facts)
    if facts.think.truncated:
        result = truncated_result(cfg, info, facts.use_vlm)
    elif not facts.extraction.is_component:
        info["extraction"]["reason"] = facts.extraction.reason
        parts = {"not_component": cfg.not_component_score}
        result = ItemResult(score=cfg.not_component_score, parts=parts, info=info, flags=["not_a_component"])
    else:
        result = component_verdict(facts, cfg, info)
    result.local += think_spans(facts.think, cfg.think_local)
    return result


def truncated_result(cfg: ReactConfig, info: dict, use_vlm: bool) -> ItemResult:
    """A response cut off inside its think block: part ``think_truncated`` (``think_truncated_score``, as low as a
    finished component with a syntax error), and ``vlm_judge``'s no-screenshot score when the VLM judge is on, as
    any component that does not compile gets; nothing to compile, lint or judge, no spans."""
    info["extraction"]["reason"] = "cut off inside the think block"
    parts = {"think_truncated": cfg.think_truncated_score}
    if use_vlm:
        parts["vlm_judge"] = cfg.vlm_failure_score
    return ItemResult(score=float(sum(parts.values())), parts=parts, info=info, flags=["think_truncated"])


def judge_part(answer: dict) -> tuple[float, list[str]]:
    """A judge's part (its score / 10, 0 without one) and its flag (``judge_unavailable`` for a judge that was down,
    ``judge_unparseable`` for a reply without a score)."""
    if answer["status"] == "ok":
        return answer["score"] / 10.0, []
    return 0.0, ["judge_unavailable" if answer["status"] == "unavailable" else "judge_unparseable"]


def component_verdict(facts: ReactFacts, cfg: ReactConfig, info: dict) -> ItemResult:
    """The verdict of an extracted component: its parts, its line penalties spread into spans, its flags."""
    code, built, rendered = facts.extraction.code, facts.built, facts.rendered
    bundle, lint, page = built.bundle, built.lint, rendered.page if rendered else None
    bundled = bool(bundle.get("ok"))
    flags = list(built.flags) + (list(rendered.flags) if rendered else [])
    info.update(bundled=bundled, diagnostics=bundle.get("diagnostics", []),
                lint=[{k: x.get(k) for k in LINT_KEYS} for x in lint])
    if page is not None:
        info.update(rendered=bool(page.get("ok")), runtime_errors=page.get("runtime_errors", []),
                    runtime_error_lines=page.get("runtime_error_lines", []),
                    render={k: page.get(k) for k in RENDER_KEYS})
        if cfg.return_screenshot and page.get("screenshot"):
            info["screenshot"] = page["screenshot"]
    elif bundled:
        flags.append("render_disabled")
    compiled = bundled and (not cfg.render or bool(page and page.get("ok")))
    info["compiled"] = compiled

    parts = {"compile": 0.0 if compiled else cfg.compile_failure_penalty,
             "eslint": scoring.eslint_global(lint, cfg.eslint_weights) if cfg.lint else 0.0}
    pen = scoring.new_penalties()
    # compiler lines: bundling diagnostics, and for a render failure the component line of each runtime error's
    # innermost stack frame (mapped through the bundle's source map)
    flagged = info["diagnostics"] + [{"line": ln} for ln in info.get("runtime_error_lines", [])]
    scoring.add_compiler_penalties(pen, flagged, cfg.compiler_line_penalty, cfg.compiler_line_normalize)
    if cfg.lint:
        scoring.add_lint_penalties(pen, lint, cfg.eslint_weights)
    if facts.use_vlm and facts.vlm is None:
        parts["vlm_judge"] = cfg.vlm_failure_score
        info["judge"]["vlm"] = {"score": None, "status": "no_screenshot"}
    if facts.llm is not None:
        j = facts.llm
        info["judge"]["llm"] = {"score": j["score"], "worst_lines": j["worst_lines"], "status": j["status"]}
        parts["llm_judge"], judge_flags = judge_part(j)
        flags += judge_flags
        if not judge_flags:
            scoring.add_ranked_lines(pen, j["worst_lines"], impacts(cfg.llm_line_impacts))
    if facts.vlm is not None:
        v = facts.vlm
        info["judge"]["vlm"] = {"score": v["score"], "status": v["status"], "lines": v.get("lines", []),
                                "attribution": v.get("attribution")}
        parts["vlm_judge"], judge_flags = judge_part(v)
        flags += judge_flags
        if not judge_flags and cfg.vlm_local:
            scoring.add_ranked_lines(pen, v.get("lines", []), impacts(cfg.vlm_line_impacts))
            if v.get("attribution") in ("unavailable", "unparseable"):
                flags.append(f"judge_{v['attribution']}")

    values = scoring.spread(pen, code.count("\n") + 1, cfg.decay_window)
    local = scoring.line_spans(code, facts.extraction.start, facts.extraction.end, values)
    if not compiled:
        flags.append("compile_failed")
    return ItemResult(score=float(sum(parts.values())), parts=parts, local=local, info=info, flags=flags)
