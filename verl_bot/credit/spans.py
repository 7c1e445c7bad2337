"""Map character spans of a response's text to its tokens.

A reward server scores the response TEXT and returns local signals on character spans (`[start, end)` Python string
indices, docs/REWARD_API.md); the policy was trained on TOKENS. Each token covers the characters its decoding added,
from the tokenizer's own decoding of the actual response ids (right for any tokenizer whose decoding is
prefix-consistent: byte-level BPE as in Qwen/SmolLM/Phi, SentencePiece); a token's local value is the mean of the
per-character values it covers. The rules: docs/architecture.md, section Span-to-token mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from verl_bot_contract.think import THINK_CLOSE, THINK_OPEN

REPLACEMENT_CHAR = "\ufffd"
_WINDOW = 6  # tokens of left context when decoding one token (enough for merges across token edges)


def _incremental_ends(decode: Callable[[Sequence[int]], str], ids: Sequence[int]) -> list[int]:
    """End offset (in the decoded text) of the characters completed by each token; O(n) decodes of short windows."""
    ends: list[int] = []
    text_len = 0
    prefix_start, read_start = 0, 0  # decode(ids[prefix_start:read_start]) is already accounted for
    for i in range(len(ids)):
        prefix_text = decode(ids[prefix_start:read_start])
        new_text = decode(ids[prefix_start : i + 1])
        if new_text.endswith(REPLACEMENT_CHAR) and i + 1 < len(ids):
            # an incomplete character so far: the token covers the characters it completed before it (as
            # `_exact_ends`); the state waits for the next tokens
            complete = new_text.rstrip(REPLACEMENT_CHAR)
            if not complete.startswith(prefix_text):
                return []
            ends.append(text_len + len(complete) - len(prefix_text))
            continue
        if new_text.startswith(prefix_text):
            text_len += len(new_text) - len(prefix_text)
        else:  # decode is not prefix-consistent over this window: let the caller fall back
            return []
        ends.append(text_len)
        prefix_start, read_start = max(0, i + 1 - _WINDOW), i + 1
    return ends


def _exact_ends(decode: Callable[[Sequence[int]], str], ids: Sequence[int]) -> list[int]:
    """Same as `_incremental_ends` by decoding every prefix: O(n^2), used only when the fast path disagrees."""
    ends = []
    for i in range(len(ids)):
        prefix = decode(ids[: i + 1])
        if i + 1 < len(ids):
            prefix = prefix.rstrip(REPLACEMENT_CHAR)
        ends.append(len(prefix))
    return ends


def text_decoder(tokenizer) -> Callable[[Sequence[int]], str]:
    """ids -> `tokenizer.decode(ids, skip_special_tokens=True)`, but with the think tags the tokenizer marks special
    written out (each special think tag splits the ids; the pieces between are decoded as usual)."""
    kept = {
        i: t.content
        for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
        if t.content in (THINK_OPEN, THINK_CLOSE) and getattr(t, "special", False)
    }

    def decode(window: Sequence[int]) -> str:
        pieces, start = [], 0
        for k, i in enumerate(window):
            if i in kept:
                pieces += [tokenizer.decode(list(window[start:k]), skip_special_tokens=True), kept[i]]
                start = k + 1
        return "".join([*pieces, tokenizer.decode(list(window[start:]), skip_special_tokens=True)]) if window else ""

    return decode


def token_char_spans(tokenizer, ids: Sequence[int]) -> tuple[str, np.ndarray]:
    """Decode `ids` and return the text and each token's character span in it.

    Args:
        tokenizer: a Hugging Face tokenizer.
        ids: the response token ids (no padding).

    Returns:
        text: `tokenizer.decode(ids, skip_special_tokens=True)`, special think tags kept (`text_decoder`).
        spans: (n, 2) int64 array of `[start, end)` character offsets per token.
    """
    ids = [int(i) for i in ids]
    decode = text_decoder(tokenizer)
    text = decode(ids)
    ends = _incremental_ends(decode, ids)
    if not ends or ends[-1] != len(text):
        ends = _exact_ends(decode, ids)
    if ends and ends[-1] != len(text):
        raise ValueError("token_char_spans: the tokenizer's decoding is not prefix-consistent for this response")
    ends_arr = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate([[0], ends_arr[:-1]]).astype(np.int64) if len(ids) else np.zeros(0, np.int64)
    spans = np.stack([starts, ends_arr], axis=1) if len(ids) else np.zeros((0, 2), np.int64)
    _give_partial_tokens_their_character(spans, ids, set(tokenizer.all_special_ids))
    return text, spans


def _give_partial_tokens_their_character(spans: np.ndarray, ids: Sequence[int], special_ids: set[int]) -> None:
    """In place: a non-special token with an empty span takes the span of the next token that completes text."""
    next_span = None
    for i in range(len(ids) - 1, -1, -1):
        start, end = spans[i]
        if end > start:
            next_span = (start, end)
        elif ids[i] not in special_ids and next_span is not None:
            spans[i] = next_span


def char_values(text_length: int, local: Sequence[dict]) -> np.ndarray:
    """Per-character local signal S from REWARD_API `local` spans: (text_length,) float64, 0 outside every span.

    Spans are clipped to the text; overlapping spans add up.
    """
    delta = np.zeros(text_length + 1, dtype=np.float64)
    for span in local:
        start = max(0, min(int(span["start"]), text_length))
        end = max(start, min(int(span["end"]), text_length))
        delta[start] += float(span["value"])
        delta[end] -= float(span["value"])
    return np.cumsum(delta)[:text_length]


def token_local_values(spans: np.ndarray, per_char: np.ndarray) -> np.ndarray:
    """Mean per-character value over each token's characters.

    Args:
        spans: (n, 2) `[start, end)` character spans of the tokens.
        per_char: (text_length,) per-character values.

    Returns:
        (n,) float64; 0 for tokens that cover no character.
    """
    cumulative = np.concatenate([[0.0], np.cumsum(per_char)])
    starts, ends = spans[:, 0], spans[:, 1]
    widths = ends - starts
    sums = cumulative[ends] - cumulative[starts]
    return np.divide(sums, widths, out=np.zeros(len(spans), dtype=np.float64), where=widths > 0)
