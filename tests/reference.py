"""Slow references the component tests check the `bot` manager against, written from the tokenizer and the
REWARD_API alone (none of verl_bot.credit's span mapping): each token's characters, and the per-token local
signal S_t of a verdict's `local` spans.

They hold for responses whose tokens each decode to whole characters (ASCII text: what these tests score);
`token_pieces` refuses any other, so a test cannot pass on a reference that does not apply.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """The characters of each token: the token decoded alone, special tokens (EOS) as no characters. Their
    concatenation must be the decoded response (else a token splits a character and this reference does not
    apply)."""
    pieces = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert "".join(pieces) == text and "\ufffd" not in text, (pieces, text)
    return pieces


def token_spans(tokenizer, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded response and each token's `[start, end)` characters in it, from `token_pieces`."""
    pieces, spans, at = token_pieces(tokenizer, ids), [], 0
    for piece in pieces:
        spans.append((at, at + len(piece)))
        at += len(piece)
    return "".join(pieces), spans


def token_local(tokenizer, ids: Sequence[int], local: Sequence[dict]) -> np.ndarray:
    """(len(ids),) S_t the slow way: each character's S is the sum of the values of the `local` spans holding it (a span
    clipped to the text), each token's S_t the mean over its characters, 0 for a token with none."""
    text, spans = token_spans(tokenizer, ids)
    per_char = []
    for c in range(len(text)):
        per_char.append(sum(float(s["value"]) for s in local
                            if max(0, int(s["start"])) <= c < min(len(text), int(s["end"]))))
    return np.array([sum(per_char[a:b]) / (b - a) if b > a else 0.0 for a, b in spans])
