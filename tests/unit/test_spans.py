"""Character spans of a response -> token positions, with the tokenizer's own decoding."""

import numpy as np
import pytest

from verl_bot.credit.spans import char_values, token_char_spans, token_local_values


def covered_text(text, spans):
    return [text[s:e] for s, e in spans]


@pytest.mark.parametrize(
    "text",
    ["const x = 1;\nlet y = 2;", "café naïve — über 日本語 😀 été", "<final>33</final>", "", "a"],
)
def test_spans_tile_the_decoded_text(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoded, spans = token_char_spans(tokenizer, ids)
    assert decoded == text
    assert spans.shape == (len(ids), 2)
    # the distinct non-empty spans, in order, tile the text exactly
    distinct = [
        tuple(s) for i, s in enumerate(spans.tolist()) if s[1] > s[0] and (i == 0 or s != spans[i - 1].tolist())
    ]
    assert "".join(text[s:e] for s, e in distinct) == text


def test_multibyte_character_split_over_tokens_goes_to_every_token_that_built_it(tokenizer):
    text = "x😀y"  # the emoji is 4 UTF-8 bytes, tokenized byte by byte by this small tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoded, spans = token_char_spans(tokenizer, ids)
    emoji_tokens = [i for i, (s, e) in enumerate(spans) if decoded[s:e] == "😀"]
    assert len(emoji_tokens) >= 2, "the test needs an emoji spread over several tokens"
    values = token_local_values(spans, char_values(len(decoded), [{"start": 1, "end": 2, "value": -1.0}]))
    assert all(values[i] == -1.0 for i in emoji_tokens)
    assert values.sum() == -len(emoji_tokens)


def test_special_tokens_cover_no_text_and_get_zero(tokenizer):
    ids = tokenizer("abc", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    decoded, spans = token_char_spans(tokenizer, ids)
    assert decoded == "abc"
    assert spans[-1, 0] == spans[-1, 1] == 3
    values = token_local_values(spans, char_values(3, [{"start": 0, "end": 3, "value": 2.0}]))
    assert values[-1] == 0.0 and (values[:-1] == 2.0).all()


def test_truncated_response_ending_inside_a_character(tokenizer):
    ids = tokenizer("ok 😀", add_special_tokens=False)["input_ids"]
    truncated = ids[:-1]  # drop the last byte of the emoji
    decoded, spans = token_char_spans(tokenizer, truncated)
    assert decoded.startswith("ok ") and decoded.endswith("\ufffd")
    assert spans[-1, 1] == len(decoded)


def test_token_straddling_a_span_edge_gets_the_mean_over_its_characters():
    spans = np.array([[0, 4], [4, 6]])
    per_char = char_values(6, [{"start": 2, "end": 5, "value": -1.0}])  # chars 2,3,4 penalised
    np.testing.assert_allclose(token_local_values(spans, per_char), [-0.5, -0.5])


def test_overlapping_spans_add_and_out_of_range_spans_are_clipped():
    per_char = char_values(4, [{"start": 0, "end": 2, "value": 1.0}, {"start": 1, "end": 99, "value": 0.5}])
    np.testing.assert_allclose(per_char, [1.0, 1.5, 0.5, 0.5])


def test_a_token_that_completes_a_character_and_starts_another_covers_what_it_completed(tokenizer):
    """A byte-level token may hold whole characters and the first byte of the next one ("a" + a lead byte): it covers
    the characters it completed, the tokens after it the rest (the fast path gave both tokens the two's text)."""
    mixed = next(i for i in range(len(tokenizer))
                 if len(piece := tokenizer.decode([i])) > 1 and piece.endswith("\ufffd") and "\ufffd" not in piece[:-1])
    head = tokenizer.decode([mixed])[:-1]
    ids = [mixed, *tokenizer(" }", add_special_tokens=False)["input_ids"]]
    decoded, spans = token_char_spans(tokenizer, ids)
    assert decoded == head + "\ufffd }"  # the lone lead byte decodes to U+FFFD
    assert spans[0].tolist() == [0, len(head)] and spans[1, 0] == len(head) and spans[-1, 1] == len(decoded)
