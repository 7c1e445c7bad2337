"""How a rollout's verdict becomes its token rewards: the one function `token_credit` (pure: numpy, no verl, no I/O).

The `bot` manager (`verl_bot.rewards.manager`) decodes the rollout into a `TokenLayout`, asks its scorer, parses the
answer once (`verl_bot.credit.verdict.validate_verdict`) and calls `token_credit`; nothing else composes S. The rules
are `token_credit`'s docstring; explained in docs/REWARD_API.md (How the manager turns a verdict into token rewards)
and docs/ALGORITHMS.md (section 2, Reward composition).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl_bot.credit.sessions import session_reward_score
from verl_bot.credit.spans import char_values, token_local_values
from verl_bot.credit.streams import token_streams
from verl_bot.credit.turns import has_context, turn_ids, turn_token_values
from verl_bot.credit.verdict import ScorerFailure, Verdict, validate_verdict, verdict_format, verdict_outcome

FLAGS_KEY = "flags"
LOCAL_SIGNAL_KEY = "local_signal"  # 1 when a generated token of the rollout has S_t != 0
LOCAL_ON_CONTEXT_KEY = "local_on_context"  # 1 when a span covered a context token (its value dropped)
TURNS_UNUSED_KEY = "turns_unused"  # 1 when a verdict's turn values met one reward per response (the scalar layout)
LOCAL_UNUSED_KEY = "local_unused"  # 1 when a verdict's local spans or output values met the scalar layout


@dataclass(frozen=True)
class OutputLayout:
    """One output of a rollout as tokens.

    text: its response text (`spans.token_char_spans`). token_spans: (n, 2) int64, the `[start, end)` characters of
    each of its n tokens. mask: (n,) its response mask (1 generated, 0 context), None when every token is
    generated. key: its fingerprint in a multi-output session (`sessions.fingerprint`), else None.
    """

    text: str
    token_spans: np.ndarray
    mask: np.ndarray | None = None
    key: str | None = None

    @property
    def generated(self) -> np.ndarray:
        """(n,) bool: the tokens the policy generated."""
        if self.mask is None:
            return np.ones(len(self.token_spans), dtype=bool)
        return np.asarray(self.mask) != 0


@dataclass(frozen=True)
class TokenLayout:
    """A rollout's outputs in order (one for most agent loops; the last is the one the request's `response` is)."""

    outputs: tuple[OutputLayout, ...]

    @property
    def last(self) -> OutputLayout:
        return self.outputs[-1]

    @property
    def turn_count(self) -> int:
        """The turns a verdict's `turns` may name (0..turn_count-1): the last output's (`turns.turn_ids`), 1 for a
        single-turn response."""
        mask = self.last.mask
        return 1 if mask is None or len(mask) == 0 else 1 + int(turn_ids(mask)[-1])


@dataclass(frozen=True)
class CreditSettings:
    """The manager's knobs that shape token credit, under their names in its declaration (`reward.reward_kwargs.bot`:
    `verl_bot.rewards.settings.ManagerSettings`, whose `credit()` builds this from them).

    overlong: (max_resp_len, buffer_len, penalty_factor) of DAPO's overlong shaping, None when off. streams: the
    named reward streams the estimator reads (`streams.streams_for`).
    """

    w_global: float = 1.0
    w_local: float = 1.0
    local_clip: float = 1.0
    failure_score: float = 0.0
    layout: str = "dense"  # `verl_bot.rewards.settings.LAYOUTS`: dense, returns or scalar
    streams: tuple[str, ...] = ()
    overlong: tuple[int, int, float] | None = None


@dataclass(frozen=True)
class TokenCredit:
    """What a rollout earned: `reward_score` as the manager returns it (a float with the scalar layout, else
    a `verl_bot.credit.dense` form: token rewards, streams, a session's outputs by fingerprint) and
    `info`, its `reward_extra_info` entries."""

    reward_score: Any
    info: dict[str, Any]


def overlong_penalty(length: int, max_resp_len: int, buffer_len: int, penalty_factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment (arXiv 2503.14476): 0 up to `max_resp_len - buffer_len` tokens, then
    linear down to `-penalty_factor` at `max_resp_len` (verl's `dapo` reward manager computes the same)."""
    exceed = length - (max_resp_len - buffer_len)
    return min(-exceed / buffer_len * penalty_factor, 0.0)


def clip_local(local: np.ndarray, bound: float) -> np.ndarray:
    """S_t clipped to [-bound, bound] per token ((n,) -> (n,)); bound 0 leaves S as it is."""
    return np.clip(local, -bound, bound) if bound > 0 else local


def compose_token_rewards(global_score: float, local_values: np.ndarray, w_global: float, w_local: float) -> np.ndarray:
    """`r_t = w_g * G + w_s * S_t` for every token of a response.

    Args:
        global_score: G of the response.
        local_values: (n,) S_t.
        w_global, w_local: the weights w_g, w_s.

    Returns:
        (n,) float64 token rewards.
    """
    return w_global * global_score + w_local * np.asarray(local_values, dtype=np.float64)


def compose_return_rewards(global_score: float, local_values: np.ndarray, w_global: float,
                           w_local: float) -> np.ndarray:
    """`r_t = w_s * S_t`, plus `w_g * G` on the last token: the return from token t (gamma = 1) is
    `w_g * G + w_s * sum_{t' >= t} S_t'`.

    Args:
        global_score: G of the response (0 for an output that does not end the rollout).
        local_values: (n,) S_t.
        w_global, w_local: the weights w_g, w_s.

    Returns:
        (n,) float64 token rewards.
    """
    rewards = w_local * np.asarray(local_values, dtype=np.float64)
    if len(rewards):
        rewards[-1] += w_global * global_score
    return rewards


def output_local(verdict: Verdict, layout: TokenLayout, j: int) -> tuple[np.ndarray, np.ndarray]:
    """S of output j before the clip, and what its spans alone put on its tokens.

    Args:
        verdict: the rollout's validated verdict. layout: the rollout's outputs. j: an output's index.

    Returns:
        (n,) float64 S^span + S^output + S^turn on the generated tokens, 0 on context tokens; (n,) float64 S^span on
        every token (context ones included: where a span landed).
    """
    output = layout.outputs[j]
    last = j == len(layout.outputs) - 1
    entries = [entry for entry in verdict["trajectories"] if entry["index"] == j]
    spans = [*(verdict["local"] if last else ()), *(span for entry in entries for span in entry["local"])]
    span_values = token_local_values(output.token_spans, char_values(len(output.text), spans))
    generated = output.generated
    total = span_values + sum(entry["value"] for entry in entries)
    if last:
        total = total + turn_token_values(verdict["turns"], generated.astype(np.int64))
    return np.where(generated, total, 0.0), span_values


def token_credit(scored: Verdict | ScorerFailure, layout: TokenLayout, settings: CreditSettings) -> TokenCredit:
    """A rollout's token rewards, reward streams and reward metrics from its verdict, by these rules:

    - G: the verdict's `global.score`, plus DAPO's overlong penalty when that shaping is on (`overlong_penalty`, on
      the last output's length). A failed scorer (`ScorerFailure`) has G = `failure_score`, no S, outcome and
      format 0.
    - layout `dense`: r_t = w_g * G + w_s * S_t on every response token of every output; G is on every token,
      context tokens included (their response mask is 0: they train nothing). Layout `returns` (verl's return-based
      estimators: a return from t sums the rewards from t on): r_t = w_s * S_t, plus w_g * G on the last token of the
      last output (where verl puts its own scalar), so the return from t is G plus the local signal after t.
    - S_t = clip(S^span_t + S^output + S^turn_t, -local_clip, local_clip) on the tokens the policy generated, and
      S_t = 0 on context tokens (a multi-turn response's tool replies and role headers), whatever a span covers:
        S^span_t   the mean of the verdict's span values over the characters token t produced (`spans.py`); the
                   top-level `local` spans belong to the last output, a `trajectories` entry's to its output j;
        S^output   a `trajectories` entry's `value`, on every token of its output;
        S^turn_t   a `turns` entry's value on every token of its assistant turn (the last output's turns).
    - An EOS covers no character: no span reaches it; it gets G and its turn's value.
    - Several outputs (a multi-output session): each gets its own S and token rewards, under one G
      (`sessions.session_reward_score` keys them by fingerprint).
    - layout `scalar`: one scalar w_g * G for verl's last token; turn values and local spans have no place: they are
      counted (`turns_unused`, `local_unused`), so a run whose scorer's local signal goes nowhere shows it.
    - Metrics (`reward_extra_info`): `local_signal` 1 when a generated token of any output has S_t != 0;
      `local_on_context` (a response with context tokens) 1 when a span covered a context token, whose value was
      dropped; `score` (G), G's parts, `flags`, `solved`/`acc`, `scorer_failed`, `scorer_error`, `scorer_error_msg`.

    Args:
        scored: the scorer's validated verdict (`verdict.validate_verdict`), or its failure.
        layout: the rollout's outputs as tokens (n_j tokens for output j).
        settings: the manager's credit knobs.

    Returns:
        `TokenCredit`: `reward_score` (w_g * G, or per output (n_j,) token rewards with the streams) and `info`.
    """
    failure = scored.message if isinstance(scored, ScorerFailure) else None
    verdict = validate_verdict({"global": {"score": settings.failure_score}}) if failure is not None else scored
    score = verdict["global"]["score"]
    info: dict[str, Any] = {
        **verdict["global"]["parts"],
        "scorer_failed": float(failure is not None),
        "scorer_error": float(verdict["error"] is not None),
        "scorer_error_msg": failure or "",
        FLAGS_KEY: ",".join(verdict["flags"]),
    }
    if settings.overlong is not None:
        info["overlong"] = overlong_penalty(len(layout.last.token_spans), *settings.overlong)
        score += info["overlong"]
    info["score"] = score
    outcome = 0.0 if failure is not None else verdict_outcome(verdict)
    if not math.isnan(outcome):
        info["solved"] = info["acc"] = outcome
    if settings.layout == "scalar":
        if verdict["turns"]:
            info[TURNS_UNUSED_KEY] = 1.0
        if verdict["local"] or any(entry["local"] or entry["value"] for entry in verdict["trajectories"]):
            info[LOCAL_UNUSED_KEY] = 1.0
        return TokenCredit(settings.w_global * score, info)

    format_score = 0.0 if failure is not None else verdict_format(verdict)
    forms, any_local, on_context = [], False, []
    for j, output in enumerate(layout.outputs):
        local, span_values = output_local(verdict, layout, j)
        local = clip_local(local, settings.local_clip)
        any_local = any_local or bool(np.any(local != 0))
        if output.mask is not None and has_context(output.mask):
            on_context.append(bool(np.any(span_values[~output.generated] != 0)))
        if settings.layout == "returns":
            g = score if j == len(layout.outputs) - 1 else 0.0
            token_rewards = compose_return_rewards(g, local, settings.w_global, settings.w_local).tolist()
        else:
            token_rewards = compose_token_rewards(score, local, settings.w_global, settings.w_local).tolist()
        if settings.streams:
            streams = token_streams(settings.streams, score, local, output.token_spans, output.text, outcome,
                                    format_score, output.mask, settings.w_local)
            forms.append({"token_rewards": token_rewards, "streams": streams})
        else:
            forms.append(token_rewards)
    info[LOCAL_SIGNAL_KEY] = float(any_local)
    if on_context:
        info[LOCAL_ON_CONTEXT_KEY] = float(any(on_context))
    return TokenCredit(session_reward_score(forms, [output.key for output in layout.outputs]), info)

