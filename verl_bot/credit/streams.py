"""Named per-token reward streams next to the composed token rewards (the carrier for estimators such as PURE).

The streams (`global`, `local`, `step_end`, `outcome`, `format`, `turn_reward`) of one response (`token_streams`,
`step_end_mask`), their TransferQueue fields `bot_stream_<name>` (`stream_fields`), each estimator's declared streams
(`declare_streams`, `streams_for`) and the estimator's reading of them (`use_streams`, `active_streams`,
`response_value`). What each stream holds and how it travels: docs/architecture.md, section Named reward streams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from verl_bot.credit.context import BatchContext, current, use_context
from verl_bot.credit.turns import turn_means
from verl_bot.errors import VerlBotConfigError
from verl_bot_contract.steps import split_steps

STREAMS = ("global", "local", "step_end", "outcome", "format", "turn_reward")
FIELD_PREFIX = "bot_stream_"

_consumers: dict[str, tuple[str, ...]] = {}


class StreamsUnavailable(RuntimeError):
    """An estimator needs reward streams that did not reach it."""


# ---- which estimator needs which streams --------------------------------------------------------


def declare_streams(estimator: str, names: Sequence[str]) -> None:
    """Record that `estimator` reads the streams `names` (a subset of STREAMS); an empty `names` records none."""
    unknown = set(names) - set(STREAMS)
    if unknown:
        raise ValueError(f"unknown reward streams {sorted(unknown)}; known: {STREAMS}")
    if names:
        _consumers[estimator] = tuple(names)


def streams_for(estimator: Any) -> tuple[str, ...]:
    """The streams the estimator named `estimator` declared (empty for every other estimator)."""
    return _consumers.get(str(getattr(estimator, "value", estimator)), ())


# ---- building the streams of one response (reward manager side) ---------------------------------


def step_end_mask(token_spans: np.ndarray, text: str) -> np.ndarray:
    """1.0 on the token that completes each step of `text` but the last (`split_steps`: its blank-line separator's
    last character) and on the last token, which ends the last step.

    Args:
        token_spans: (n, 2) `[start, end)` characters of each token (`spans.token_char_spans`).
        text: the response text the spans index.

    Returns:
        (n,) float64 mask.
    """
    mask = np.zeros(len(token_spans), dtype=np.float64)
    if len(token_spans) == 0:
        return mask
    last_chars = np.array([step.end - 1 for step in split_steps(text)[:-1]], dtype=np.int64)
    if last_chars.size:
        owners = np.searchsorted(token_spans[:, 1], last_chars, side="right")  # first token ending after it
        mask[owners[owners < len(token_spans)]] = 1.0
    mask[-1] = 1.0
    return mask


def token_streams(
    names: Sequence[str],
    global_score: float,
    local_values: np.ndarray,
    token_spans: np.ndarray,
    text: str,
    outcome: float,
    format_score: float = 0.0,
    mask: np.ndarray | None = None,
    w_local: float = 1.0,
) -> dict[str, list[float]]:
    """The requested streams of one response, each a list of n floats (n = number of tokens).

    Args:
        names: which of STREAMS to build.
        global_score: G. local_values: (n,) S_t. token_spans: (n, 2). text: the response text.
        outcome: `verdict.verdict_outcome(...)`. format_score: `verdict.verdict_format(...)`.
        mask: (n,) the response mask (None: every token generated). w_local: w_s (`turn_reward` only).
    """
    n = len(local_values)
    at_last = np.zeros(n, dtype=np.float64)

    def on_last(value: float) -> np.ndarray:
        row = at_last.copy()
        if n:
            row[-1] = value
        return row

    builders = {
        "global": lambda: on_last(global_score),
        "local": lambda: np.asarray(local_values, dtype=np.float64),
        "step_end": lambda: step_end_mask(token_spans, text),
        "outcome": lambda: on_last(outcome),
        "format": lambda: on_last(format_score),
        "turn_reward": lambda: w_local * turn_means(local_values, mask),
    }
    return {name: builders[name]().tolist() for name in names}


# ---- carrying them: trajectory fields (used by verl_bot.hooks.v1.agent_loop_output) ----------------------------------


def stream_fields(streams: Mapping[str, Sequence[float]], length: int) -> dict[str, torch.Tensor]:
    """TransferQueue fields `bot_stream_<name>`: (length,) float32 tensors, checked against the response length."""
    fields = {}
    for name, values in streams.items():
        row = torch.as_tensor(list(values), dtype=torch.float32)
        if row.dim() != 1 or row.numel() != length:
            raise VerlBotConfigError(
                f"verl-bot reward stream {name!r}: {row.numel()} values for a response of {length} tokens"
            )
        fields[FIELD_PREFIX + name] = row
    return fields


# ---- feeding them to the estimator (trainer side) -----------------------------------------------


def response_value(stream: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B,): the one value a per-response stream (`global`, `outcome`, `format`) carries per row.

    The manager writes it on the response's last token, which the response mask may not cover: a
    multi-turn rollout truncated inside a tool observation ends in masked tokens. Every other entry of
    the row is 0 (padding included), so the row's sum is that value wherever it sits (NaN stays NaN).
    """
    return stream.sum(dim=1)



@contextlib.contextmanager
def use_streams(streams: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """Make `streams` (name -> (B, T) tensor, rows in the batch's order) the active streams inside the block
    (a batch context holding only them: for tests and scripts that call an estimator directly)."""
    with use_context(BatchContext(streams=dict(streams))):
        yield


def active_streams(estimator: str, names: Sequence[str], response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The active streams `names`, each (B, T) like `response_mask`, on its device; a clear error otherwise."""
    ctx = current()
    streams = ctx.streams if ctx is not None else {}
    if any(name not in streams for name in names):
        raise StreamsUnavailable(
            f"adv_estimator={estimator} needs the reward streams {list(names)} of verl-bot's `bot` reward manager "
            "(reward.reward_manager.name=bot, token_level true); they reach the estimator through verl's v1 trainer "
            "(PPOTrainer._compute_advantage, wrapped by verl-bot). None are active here."
        )
    out = {}
    for name in names:
        tensor = streams[name]
        if tensor.shape != response_mask.shape:
            raise StreamsUnavailable(
                f"reward stream {name!r} has shape {tuple(tensor.shape)}, the batch {tuple(response_mask.shape)}"
            )
        out[name] = tensor.to(response_mask.device)
    return out
