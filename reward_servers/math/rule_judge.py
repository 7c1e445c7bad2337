"""A rule-based step judge for integer arithmetic chains: the LLM step judge's stand-in on the CPU task.

The CPU task ``toy_math`` asks for a chain such as "Compute 3+4-2." (integers joined by ``+`` and ``-``, evaluated
left to right) in the paper's format, one operation per ``<step k>`` block. The rule reads the problem as the first
arithmetic chain of the problem text (``parse_chain``: what the LLM judge reads too, never the ground truth) and
judges each step against the problem's operation and the value the previous step stated (``check_step``), under the
LLM judge's strategies (``rule_judge_steps``). The task: docs/cpu_demo.md, section A second CPU task: `toy_math`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from reward_servers.math.step_judge import StepVerdict, run_strategy

_NUM = r"[+-]?\d{1,12}"  # bounded: no int() of a 10,000-digit string
_CHAIN = re.compile(rf"({_NUM})((?:\s*[+-]\s*\d{{1,12}})+)")
_OP = re.compile(r"([+-])\s*(\d{1,12})")
_STEP = re.compile(rf"^\s*({_NUM})\s*([+-])\s*(\d{{1,12}})\s*=\s*({_NUM})\s*$")

CORRECT, INCORRECT, UNCERTAIN = StepVerdict(1, "correct"), StepVerdict(-1, "incorrect"), StepVerdict(0, "uncertain")


@dataclass(frozen=True)
class Chain:
    """``start`` followed by ``ops`` ((sign, operand), ...), evaluated left to right."""

    start: int
    ops: tuple[tuple[str, int], ...]

    def values(self) -> list[int]:
        """The running value after each operation (``values()[-1]`` is the answer)."""
        out, v = [], self.start
        for op, b in self.ops:
            v = apply(v, op, b)
            out.append(v)
        return out


def apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def parse_chain(problem: str) -> Chain | None:
    """The first chain of at least one operation in ``problem`` ("Compute 3+4-2." -> 3, (+4, -2)), else None."""
    m = _CHAIN.search(problem)
    if m is None:
        return None
    return Chain(int(m.group(1)), tuple((op, int(b)) for op, b in _OP.findall(m.group(2))))


def parse_step(step: str) -> tuple[int, str, int, int] | None:
    """``(a, op, b, c)`` of a step text ``a op b = c`` (spaces allowed), else None."""
    m = _STEP.match(step)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))


def check_step(chain: Chain | None, steps: list[str], s: int) -> StepVerdict:
    """The rule's verdict on 0-based step ``s`` of ``steps`` (inner texts) for the problem ``chain``.

    Step s (1-based) must be ``a op b = c`` with ``op b`` the problem's s-th operation, ``c == a op b``, and ``a``
    the value the previous step stated (its right-hand side, right or wrong), like an LLM judge that sees the
    previous step: a step after a wrong one is judged against the wrong value. Step 1's ``a`` is the problem's first
    number; when the previous step states no value (it does not parse), ``a`` must be the true running value.
    ``correct`` (+1) when all hold; ``incorrect`` (-1) otherwise (a step that does not parse, a wrong operand or
    operation, a wrong result, a step past the problem's last operation); ``uncertain`` (0) when the problem text
    holds no chain the rule can read.
    """
    if chain is None:
        return UNCERTAIN
    step = parse_step(steps[s])
    if step is None or s >= len(chain.ops):
        return INCORRECT
    a, op, b, c = step
    previous = parse_step(steps[s - 1]) if s > 0 else None
    expected_a = chain.start if s == 0 else previous[3] if previous is not None else chain.values()[s - 1]
    ok = a == expected_a and (op, b) == chain.ops[s] and c == apply(a, op, b)
    return CORRECT if ok else INCORRECT


async def rule_judge_steps(
    problem: str, steps: list[str], strategy: str = "error_propagation", max_steps: int = 64
) -> list[StepVerdict]:
    """Verdicts for ``steps`` (inner texts, in order) under ``strategy``, as the LLM judge's ``judge_steps``.

    The strategies are the LLM judge's own (:func:`reward_servers.math.step_judge.run_strategy`): under the default
    ``error_propagation`` the rule is never asked about a step after the first incorrect one, which gets e_s = 0
    ("skipped"); the "wrong value" rule of ``check_step`` matters under ``independent`` and ``context_aware`` (which
    the rule treats like ``independent``: it ignores its own earlier verdicts). The LLM judge's window W does not
    apply: the rule always sees exactly the previous step.
    """
    chain = parse_chain(problem)

    async def ask(s: int, verdicts: list[int | None] | None) -> StepVerdict:
        return check_step(chain, steps, s)

    return await run_strategy(ask, len(steps), strategy, max_steps)
