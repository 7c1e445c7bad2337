"""Answer check with math-verify, run inside worker processes (``reward_servers.math.verify:check``).

math-verify's timeouts use ``signal.alarm``: :func:`check` must run in the MAIN thread of its process, which the
worker pool guarantees. The pool adds a hard wall-clock limit on top (kill + replace).

Payload (dict): ``pred`` (extracted answer text, already cleaned), ``gold`` (int for AIME, str otherwise),
``mode`` ("aime" | "math"), ``timeout_s`` (int seconds for math-verify's own parse and verify timeouts).
Result (dict): ``correct`` (bool), ``value`` (normalised answer as str, or None), ``reason`` (None or a short
code: "not_integer" | "out_of_range" | "unparsed").
"""

from __future__ import annotations

from typing import Any


def _wrap(text: str) -> str:
    """Put a bare answer in math mode so math-verify's LaTeX extractor sees the whole expression.

    (Without it, ``3\\sqrt{2}`` would be read as the plain number 3 by the expression extractor.)
    """
    return text if "\\boxed" in text or "$" in text else f"${text}$"


def _as_integer(expr: Any) -> int | None:
    """The integer value of a parsed sympy expression (``33``, ``33.0``, ``Eq(x, 33)``), else None."""
    import sympy

    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        expr = expr.rhs
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Float) and expr == int(expr):
        return int(expr)
    if isinstance(expr, sympy.Rational) and expr.q == 1:
        return int(expr.p)
    return None


def check(payload: dict) -> dict:
    """Verify one answer (see module docstring). Never raises for bad math; returns ``correct=False``."""
    from math_verify import parse, verify

    t = max(1, int(payload.get("timeout_s", 3)))
    pred = parse(_wrap(payload["pred"]), parsing_timeout=t)
    if not pred:
        return {"correct": False, "value": None, "reason": "unparsed"}
    shown = str(pred[-1]) if isinstance(pred[-1], str) else str(pred[0])
    if payload["mode"] == "aime":
        v = _as_integer(pred[0])
        if v is None and getattr(pred[0], "is_number", False):  # unevaluated numeric form, e.g. sqrt(1089)
            ok = bool(verify(parse(f"${int(payload['gold'])}$", parsing_timeout=t), pred, timeout_seconds=t))
            return {"correct": ok, "value": shown, "reason": None if ok else "not_integer"}
        if v is None:
            return {"correct": False, "value": shown, "reason": "not_integer"}
        if not 0 <= v <= 999:
            return {"correct": False, "value": str(v), "reason": "out_of_range"}
        return {"correct": v == int(payload["gold"]), "value": str(v), "reason": None}
    gold = parse(_wrap(str(payload["gold"])), parsing_timeout=t)
    if not gold:
        raise ValueError(f"ground truth {str(payload['gold'])[:80]!r} cannot be parsed")
    ok = bool(verify(gold, pred, timeout_seconds=t))
    return {"correct": ok, "value": shown, "reason": None}


def check_many(payloads: list[dict]) -> list[dict]:
    """:func:`check` over a list, in the calling (main) thread: the one-process baseline of the benchmark."""
    return [check(p) for p in payloads]


def hang(payload: Any) -> Any:
    """Test target: blocks SIGALRM and sleeps ``payload`` seconds when it is a number > 0 (a hung parse that no
    alarm can stop), else returns it. Used by the pool tests."""
    import signal
    import time

    if isinstance(payload, int | float) and payload > 0:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(payload)
    if payload == "die":
        import os

        os._exit(3)
    return payload
