"""The slow references of tests/harness/manager.py, by hand (they are the expectations of the manager's tests)."""

import pytest

from tests.harness.manager import token_local, token_pieces, token_spans


class Pieces:
    """A tokenizer's `decode` over a fixed vocabulary (id 0: the EOS, special), enough for the references."""

    vocab = {0: "<eos>", 1: "ab", 2: "cde", 3: "f", 4: "\ufffd"}
    all_special_ids = [0]

    def decode(self, ids, skip_special_tokens=False):
        return "".join("" if (i == 0 and skip_special_tokens) else self.vocab[i] for i in ids)


def test_token_local_by_hand():
    ids = [1, 2, 3, 0]  # "ab" "cde" "f" EOS
    assert token_spans(Pieces(), ids) == ("abcdef", [(0, 2), (2, 5), (5, 6), (6, 6)])
    # per character: a 0, b -0.5, c -0.5, d -0.5 + 1, e 1, f 1 (the second span clipped to the text)
    local = [{"start": 1, "end": 4, "value": -0.5}, {"start": 3, "end": 99, "value": 1.0}]
    assert token_local(Pieces(), ids, local).tolist() == pytest.approx([-0.25, 1 / 3, 1.0, 0.0])
    assert token_local(Pieces(), ids, []).tolist() == [0.0] * 4


def test_a_response_the_references_do_not_cover_is_refused():
    with pytest.raises(AssertionError):
        token_pieces(Pieces(), [1, 4])  # a token that is part of a character
