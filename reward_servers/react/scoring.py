"""Score arithmetic of docs/ALGORITHMS.md "React rewards": global parts and local line penalties.

Local signal of line m: S(m) = sum over penalised lines l of p_l * phi(|m - l|), phi(d) = max(0, 1 - d/(w+1)).
Penalties on the same line add up. Lines are 1-based lines of the extracted code; each line with S != 0 becomes
one span of the response: [code_start + start of line, code_start + start of next line) (the newline included),
the last line ending at code_end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from verl_bot_contract.verdict import Span

from .extract import line_starts

ESLINT_WEIGHTS = {"fatal": -0.5, "error": -0.1, "warning": -0.02}
LLM_LINE_IMPACTS = (-0.3, -0.2, -0.1)  # worst line first: -3/10, -2/10, -1/10


def phi(d: int, window: int = 3) -> float:
    return max(0.0, 1.0 - abs(d) / (window + 1))


def eslint_global(findings: Iterable[Mapping], weights: Mapping[str, float] = ESLINT_WEIGHTS) -> float:
    return float(sum(weights.get(f.get("severity", "warning"), 0.0) for f in findings))


def add_compiler_penalties(pen: dict[int, float], diagnostics: Iterable[Mapping], per_line: float = -1.0,
                           normalize: bool = False) -> None:
    """-1 per flagged line (a line with several diagnostics counts once); -1/|E| each when ``normalize``."""
    lines = sorted({int(d["line"]) for d in diagnostics if d.get("line")})
    if not lines:
        return
    p = per_line / len(lines) if normalize else per_line
    for ln in lines:
        pen[ln] += p


def add_lint_penalties(pen: dict[int, float], findings: Iterable[Mapping],
                       weights: Mapping[str, float] = ESLINT_WEIGHTS) -> None:
    for f in findings:
        if f.get("line"):
            pen[int(f["line"])] += weights.get(f.get("severity", "warning"), 0.0)


def add_ranked_lines(pen: dict[int, float], lines: Iterable[int], impacts: Iterable[float] = LLM_LINE_IMPACTS,
                     scale: float = 1.0) -> None:
    """Judge's worst lines, worst first: impacts -3/10, -2/10, -1/10 by default."""
    for ln, p in zip(lines, impacts, strict=False):
        pen[int(ln)] += p * scale


def spread(pen: Mapping[int, float], n_lines: int, window: int = 3) -> dict[int, float]:
    """Line -> S after the decay phi; only lines 1..n_lines, only non-zero values."""
    out: dict[int, float] = defaultdict(float)
    for ln, p in pen.items():
        if p == 0 or not 1 <= ln <= n_lines:
            continue
        for m in range(max(1, ln - window), min(n_lines, ln + window) + 1):
            out[m] += p * phi(m - ln, window)
    return {m: v for m, v in sorted(out.items()) if abs(v) > 1e-12}


def line_spans(code: str, code_start: int, code_end: int, values: Mapping[int, float]) -> list[Span]:
    """Map line values to sorted, non-overlapping character spans of the response."""
    starts = line_starts(code)
    n = len(starts)
    spans = []
    for ln, v in sorted(values.items()):
        if not 1 <= ln <= n:
            continue
        s = code_start + starts[ln - 1]
        e = code_start + starts[ln] if ln < n else code_end
        if e > s:
            spans.append(Span(start=s, end=e, value=float(v)))
    return spans


def new_penalties() -> dict[int, float]:
    return defaultdict(float)
