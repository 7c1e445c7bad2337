"""Token records (verl_bot/observe/token_records.py) and the pieces of the token-credit report (training_report.py):
exact token bytes for byte-level BPE and SentencePiece tokenizers, legible display of any byte, the colour
scale, the knobs and their start-up check on verl's composed config."""

from __future__ import annotations

import json

import pytest

from tests.conftest import compose_verl_config
from verl_bot.errors import VerlBotConfigError
from verl_bot.eval.training_report import match_groups
from verl_bot.launch.preflight import check_config
from verl_bot.observe.token_records import (
    build_records,
    chosen_groups,
    config_problem,
    is_byte_level,
    read_records,
    record_dir,
    recorded_files,
    recorded_steps,
    token_bytes,
    write_records,
)
from verl_bot.observe.token_view import NEGATIVE, POSITIVE, colour, display_segments, nice_scale


# ------------------------------------------------------------------------------------------ token bytes
def test_byte_level_tokens_are_the_exact_bytes_of_the_text(tokenizer):
    text = "caf\u00e9 \u65e5\u672c\u8a9e \U0001f600\n\tok \x07"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    raw, special = token_bytes(tokenizer, [*ids, end])
    assert is_byte_level(tokenizer)
    assert special == [False] * len(ids) + [True]
    assert b"".join(raw[:-1]) == text.encode("utf-8")
    assert raw[-1] == b"<|im_end|>"
    assert any(len(r) == 1 and r[0] >= 0x80 for r in raw[:-1]), "the tiny tokenizer splits some multi-byte characters"


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    """A Llama-style tokenizer: U+2581 for spaces, byte fallback `<0xNN>` for characters not in the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    vocab.update({"\u2581": 259, "a": 260, "\u2581a": 261, "b": 262})
    model = models.BPE(vocab=vocab, merges=[("\u2581", "a")], byte_fallback=True, unk_token="<unk>")
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def test_sentencepiece_tokens_spaces_and_byte_fallback(sentencepiece_tokenizer):
    tok = sentencepiece_tokenizer
    ids = tok("a b\u00e9", add_special_tokens=False)["input_ids"]
    raw, special = token_bytes(tok, [*ids, tok.eos_token_id])
    assert not is_byte_level(tok)
    assert raw[:-1] == [b" a", b" ", b"b", b"\xc3", b"\xa9"]  # hand-read: U+2581 is a space, <0xC3> one byte
    assert special == [False] * 5 + [True]
    assert b"".join(raw[:-1]).decode() == " " + tok.decode(ids)  # the decoder strips the one leading space


# ------------------------------------------------------------------------------------------ display
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xe2", [("<0xE2>", "byte")]),
        (b"a\xe2\x80", [("a", "text"), ("<0xE2>", "byte"), ("<0x80>", "byte")]),
        (b"\xe2\x80\x94x", [("\u2014x", "text")]),
        (b" hi\n", [("\u00b7", "space"), ("hi", "text"), ("\u21b5", "space")]),
        (b"\t", [("\u2192", "space")]),
        (b"\x07\x7f\r", [("<0x07>", "control"), ("<0x7F>", "control"), ("<0x0D>", "control")]),
        ("\u200b\u00a0".encode(), [("<U+200B>", "control"), ("<U+00A0>", "control")]),
        (b"\xf0\x9f\x98\x80", [("\U0001f600", "text")]),
        (b"", []),
    ],
)
def test_every_byte_is_shown_legibly(raw, expected):
    assert display_segments(raw) == expected


def test_display_never_shows_a_replacement_character():
    for b in range(256):
        for raw in (bytes([b]), bytes([b, 0x80]), bytes([0xE2, b])):
            shown = "".join(text for text, _ in display_segments(raw))
            assert "\ufffd" not in shown and shown.isprintable(), raw
            assert all(ch.isascii() or ch in "\u00b7\u21b5\u2192" for text, kind in display_segments(raw)
                       if kind != "text" for ch in text), raw  # markers any font can show


# ------------------------------------------------------------------------------------------ colours
def test_colour_scale_by_hand():
    assert colour(0.0, 2.0) == (255, 255, 255)
    assert colour(2.0, 2.0) == POSITIVE and colour(5.0, 2.0) == POSITIVE  # clipped beyond the scale
    assert colour(-2.0, 2.0) == NEGATIVE
    # half way to red (178, 24, 43): 255 - 0.5 * (77, 231, 212) = (216.5, 139.5, 149) -> Python's round
    assert colour(-1.0, 2.0) == (216, 140, 149)
    assert colour(0.5, 2.0) == (round(255 - 0.25 * 222), round(255 - 0.25 * 153), round(255 - 0.25 * 83))


@pytest.mark.parametrize(
    ("largest", "scale"),
    [(0.73, 0.8), (1.0, 1.0), (1.3, 1.5), (2.1, 2.5), (3.0, 3.0), (5.1, 6.0), (9.0, 10.0), (0.012, 0.015)],
)
def test_nice_scale(largest, scale):
    assert nice_scale(largest) == pytest.approx(scale)
    assert nice_scale(0.0) == 1.0


# ------------------------------------------------------------------------------------------ knobs
def test_steps_and_groups_knobs():
    assert recorded_steps({"token_report_steps": [1, -1]}, 20) == {1, 20}
    assert recorded_steps({"token_report_steps": "3"}, 20) == {3}
    assert recorded_steps({}, 20) == set()
    with pytest.raises(ValueError, match="outside 1..20"):
        recorded_steps({"token_report_steps": [21]}, 20)
    assert config_problem({"token_report_steps": [1, -1]}, None) is None
    assert "0 is neither" in config_problem({"token_report_steps": [0]}, None)
    assert "outside 1..5" in config_problem({"token_report_steps": [-6]}, 5)
    assert ">= 0" in config_problem({"token_report_steps": [1], "token_report_groups": -1}, None)
    assert "step numbers" in config_problem({"token_report_steps": ["last"]}, None)
    assert record_dir({}, "/ckpt").as_posix() == "/ckpt/token_records"
    assert record_dir({"token_report_dir": "/x"}, "/ckpt").as_posix() == "/x"


def test_groups_are_chosen_by_prompt_text():
    uids = ["u3", "u3", "u1", "u1", "u2", "u2"]
    prompts = ["c", "c", "a", "a", "b", "b"]
    assert chosen_groups(uids, prompts, 2) == ["u1", "u2"]
    assert chosen_groups(uids, prompts, 0) == ["u1", "u2", "u3"]


def test_a_bad_knob_stops_verls_config_before_the_run():
    cfg = compose_verl_config(["algorithm.adv_estimator=grpo", "+algorithm.token_report_steps=[0]"])
    with pytest.raises(VerlBotConfigError, match="token_report_steps"):
        check_config(cfg)
    cfg = compose_verl_config(
        ["algorithm.adv_estimator=grpo", "trainer.total_training_steps=5", "+algorithm.token_report_steps=[1,9]"]
    )
    with pytest.raises(VerlBotConfigError, match="outside 1..5"):
        check_config(cfg)
    check_config(compose_verl_config(["algorithm.adv_estimator=grpo", "+algorithm.token_report_steps=[1,-1]"]))


# ------------------------------------------------------------------------------------------ records
def test_records_round_trip_and_group_matching(tmp_path, tokenizer):
    prompt = tokenizer("Write good text", add_special_tokens=False)["input_ids"]
    other = tokenizer("Write bad text", add_special_tokens=False)["input_ids"]
    ids = tokenizer("ok \u00e9", add_special_tokens=False)["input_ids"]
    rows = [
        {"uid": uid, "key": f"{uid}_0_{k}", "data_source": "toy_lint", "prompt_ids": p, "response_ids": ids,
         "rewards": [0.5] * len(ids), "advantages": [float(k)] * len(ids), "info": {"score": 0.5, "acc": 1, "x": "s"}}
        for uid, p in (("g1", prompt), ("g2", other)) for k in range(2)
    ]
    records = build_records(3, "bot", rows, tokenizer, groups=1)
    assert {r["uid"] for r in records} == {"g2"}  # "Write bad ..." < "Write good ..."
    assert records[0]["info"] == {"score": 0.5, "acc": 1.0}
    path = write_records(tmp_path, 3, records)
    write_records(tmp_path, 3, records, append=True)
    assert len(read_records(path)) == 4 and recorded_files(tmp_path) == {3: path}
    write_records(tmp_path, 3, records)  # a new run's first write replaces the file
    assert len(read_records(path)) == 2
    bad = dict(records[0], advantages=[0.0])
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="not a token record"):
        read_records(path)

    other_run = [dict(r, uid="x" + r["uid"]) for r in build_records(3, "grpo", rows, tokenizer, groups=2)]
    matched = match_groups({"bot": records, "grpo": other_run}, groups=4)
    assert [sorted(runs) for _, runs in matched] == [["bot", "grpo"], ["grpo"]]  # shared prompts first
    assert [len(runs["grpo"]) for _, runs in matched] == [2, 2]


def test_several_groups_of_one_prompt_are_matched_in_order():
    """A step may hold the same prompt twice (a dataset with repeated prompts): n-th group with n-th group."""

    def rows(run, uids):
        prompt = {0: "p", 1: "p", 2: "q"}
        return [{"uid": f"{run}{u}", "prompt": prompt[u], "key": f"{run}{u}_{k}"} for u in uids for k in (0, 1)]

    matched = match_groups({"bot": rows("b", [0, 1, 2]), "grpo": rows("g", [0, 1, 2])}, groups=0)
    assert [key for key, _ in matched] == [("p", 0), ("p", 1), ("q", 0)]
    pairs = [[runs[r][0]["uid"] for r in ("bot", "grpo")] for _, runs in matched]
    assert pairs == [["b0", "g0"], ["b1", "g1"], ["b2", "g2"]]
