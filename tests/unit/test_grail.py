"""GRAIL (verl_bot/advantage/grail.py): answer spans, the weight function against a port of the authors' rules,
the saliency against a plain autograd reference on the tiny model, and start-up checks.

The actor-update path inside verl's real FSDP2 engine is tested in tests/component/test_grail_engine.py; through verl's
trainer, on the AIME recipe with verl's vLLM rollout, in tests/e2e/test_recipes_cpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_bot.advantage.grail import (
    SPAN_AFTER,
    SPAN_CONTENT,
    SPAN_FIELD,
    SPAN_MARKER,
    SPAN_OTHER,
    AnswerSpan,
    GrailSettings,
    answer_saliency,
    answer_span,
    first_boxed_span,
    first_final_span,
    grail_weights,
    reweighted_rows,
    span_codes,
    weight_stats,
)


# ------------------------------------------------------------------------------------------------ spans
def test_boxed_span_is_the_first_complete_one_with_nested_braces():
    text = "x \\boxed{1 \\boxed{\\frac{1}{2}} y"
    # the first \boxed{ never closes (depth stays > 0 to the end): skipped; the nested one is found
    span = first_boxed_span(text)
    assert text[span.start : span.end] == "\\boxed{\\frac{1}{2}}"
    assert text[span.content_start : span.content_end] == "\\frac{1}{2}"
    assert first_boxed_span("no box here") is None
    assert first_boxed_span("\\boxed{unclosed") is None
    two = "\\boxed{3} then \\boxed{4}"
    assert two[slice(*first_boxed_span(two)[1:3])] == "3"


def test_final_span_reads_tags_like_the_math_reward():
    text = "<step 1>2+2</step 1>\n< FINAL >4</final > after"
    span = first_final_span(text)
    assert text[span.start : span.content_start] == "< FINAL >"
    assert text[span.content_start : span.content_end] == "4"
    assert text[span.content_end : span.end] == "</final >"
    assert first_final_span("<final>4") is None
    # an unclosed <final> followed by a complete block: the complete one, no tag inside the content
    text = "<final>x <final>7</final>"
    assert text[slice(*first_final_span(text)[1:3])] == "7"


def test_answer_modes():
    both = "\\boxed{1} <final>2</final>"
    assert both[slice(*answer_span(both, "auto")[1:3])] == "2"
    assert both[slice(*answer_span(both, "boxed")[1:3])] == "1"
    assert both[slice(*answer_span(both, "final")[1:3])] == "2"
    assert answer_span("\\boxed{1}", "final") is None
    assert "\\boxed{1}"[slice(*answer_span("\\boxed{1}", "auto")[1:3])] == "1"


def test_the_answer_is_looked_for_after_the_think_block():
    """A reasoning model's drafts inside <think> are not its answer (the reward servers score the text after
    </think>); a response cut off inside the block has no answer."""
    text = "<think>maybe <final>3</final> or \\boxed{4}</think>\n\nso \\boxed{5}"
    assert answer_span(text, "auto") == AnswerSpan(55, 62, 63, 64)  # offsets into the whole text
    assert text[55:62] == "\\boxed{" and text[62:63] == "5"
    assert answer_span(text, "final") is None
    assert answer_span("<think>so <final>3</final>", "auto") is None  # cut off inside the block
    assert answer_span("step\n</think>\n<final>7</final>", "final") == AnswerSpan(14, 21, 22, 30)  # opened by
    # the chat template: the response holds only the closing tag


def test_span_codes_by_hand():
    # text "ab\boxed{12}c" ; span: marker [2,9), content [9,11), closing [11,12), after from 12
    span = AnswerSpan(2, 9, 11, 12)
    char_spans = np.array(
        [
            [0, 2],  # "ab"               other
            [2, 8],  # "\boxed"           marker
            [8, 10],  # "{1"              marker+content -> content
            [10, 12],  # "2}"             content+closing -> content
            [12, 13],  # "c"              after
            [13, 13],  # EOS (no chars)   after
        ]
    )
    assert span_codes(char_spans, span).tolist() == [
        SPAN_OTHER, SPAN_MARKER, SPAN_CONTENT, SPAN_CONTENT, SPAN_AFTER, SPAN_AFTER,
    ]
    straddle = np.array([[0, 3], [3, 11], [11, 13]])  # "ab\" / "boxed{12" / "}c"
    assert span_codes(straddle, span).tolist() == [SPAN_MARKER, SPAN_CONTENT, SPAN_MARKER]
    assert span_codes(char_spans, None).tolist() == [SPAN_OTHER] * 6


def test_span_codes_through_the_tokenizer(tokenizer):
    """The trainer's path: token ids -> exact char spans -> codes; content tokens decode to the content."""
    from verl_bot.advantage.grail_update import response_span_codes

    texts = [
        "<step 1>3+4=7</step 1>\n\n<final>7</final>",
        "So the answer is \\boxed{\\frac{1}{2}}. Done",
        "no answer at all",
        "caf\u00e9 \\boxed{\u65e5\u672c} \U0001f600",
    ]
    ids = [torch.tensor(tokenizer.encode(t, add_special_tokens=False) + [tokenizer.eos_token_id]) for t in texts]
    codes = [torch.from_numpy(c) for c in response_span_codes(tokenizer, [row.tolist() for row in ids], "auto")]
    contents = ["7", "\\frac{1}{2}", None, "\u65e5\u672c"]
    for row, code, content in zip(ids, codes, contents, strict=True):
        assert len(code) == len(row)
        if content is None:
            assert not code.any()
            continue
        assert tokenizer.decode(row[code == SPAN_CONTENT].tolist()).strip() == content
        assert code[-1] == SPAN_AFTER  # EOS after the answer
        first = int(np.flatnonzero(code.numpy() != SPAN_OTHER)[0])
        assert code[first] == SPAN_MARKER  # the span starts with its marker


# ------------------------------------------------------------------------------------------ weight function
def authors_weights(scores, mask, answer_mask, boundary_mask, content_mask, post_mask, advantages, cfg):
    """The authors' phase 2 (declare-lab/grail `compute_grail_weights`), line by line on boolean masks."""
    grads_ok = ~answer_mask.any(dim=-1, keepdim=True)  # no_answer
    fallback = grads_ok
    if cfg.rollout_symmetry == "correct":
        fallback = fallback | (advantages <= 0).unsqueeze(-1)
    elif cfg.rollout_symmetry == "wrong":
        fallback = fallback | (advantages > 0).unsqueeze(-1)
    float_mask = mask.float()
    log_scores = torch.log(scores + 1e-8)
    valid_counts = float_mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
    mean_log_scores = (log_scores * float_mask).sum(dim=-1, keepdim=True) / valid_counts
    variance = ((log_scores - mean_log_scores) ** 2) * float_mask
    std_log_scores = torch.sqrt(variance.sum(dim=-1, keepdim=True) / valid_counts + 1e-8)
    z_scores = (log_scores - mean_log_scores) / std_log_scores
    raw_weights = cfg.mean + (z_scores * cfg.std)
    clipped_w = raw_weights.clamp(cfg.w_min, cfg.w_max)
    weights = torch.where(fallback, torch.ones_like(clipped_w), clipped_w)
    weights = weights * float_mask
    weights[content_mask] = cfg.w_max
    weights[boundary_mask] = cfg.mean
    weights[post_mask & mask.bool()] = cfg.mean
    return weights


def masks_from_codes(span):
    return (
        (span == SPAN_MARKER) | (span == SPAN_CONTENT),
        span == SPAN_MARKER,
        span == SPAN_CONTENT,
        span == SPAN_AFTER,
    )


@st.composite
def batches(draw):
    b = draw(st.integers(1, 5))
    t = draw(st.integers(1, 12))
    scores = torch.tensor(draw(st.lists(st.floats(0.0, 50.0, width=32), min_size=b * t, max_size=b * t))).view(b, t)
    lengths = draw(st.lists(st.integers(0, t), min_size=b, max_size=b))
    span = torch.zeros(b, t, dtype=torch.long)
    for i, n in enumerate(lengths):
        if n >= 3 and draw(st.booleans()):  # an answer: marker, content..., closing, then after
            s = draw(st.integers(0, n - 3))
            e = draw(st.integers(s + 3, n))
            span[i, s] = SPAN_MARKER
            span[i, s + 1 : e - 1] = SPAN_CONTENT
            span[i, e - 1] = SPAN_MARKER
            span[i, e:n] = SPAN_AFTER
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).float()
    adv = torch.tensor(draw(st.lists(st.sampled_from([-1.5, -0.2, 0.0, 0.7]), min_size=b, max_size=b)))
    cfg = GrailSettings(
        std=draw(st.sampled_from([0.5, 1.0])),
        w_min=draw(st.sampled_from([0.1, 0.5])),
        rollout_symmetry=draw(st.sampled_from(["wrong", "correct", "all"])),
    )
    return scores, span, mask, adv, cfg


@settings(max_examples=200, deadline=None)
@given(batches())
def test_weights_match_the_authors_rules(batch):
    scores, span, mask, adv, cfg = batch
    ours = grail_weights(scores, span, mask, reweighted_rows(adv, cfg.rollout_symmetry), cfg.std, cfg.mean,
                         cfg.w_min, cfg.w_max)
    ref = authors_weights(scores, mask, *masks_from_codes(span), adv, cfg)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_weights_by_hand():
    o, m, c, a = SPAN_OTHER, SPAN_MARKER, SPAN_CONTENT, SPAN_AFTER
    span = torch.tensor([[o, o, o, o, o], [o, m, c, m, a], [o, m, c, m, a], [o, o, o, o, o]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.float)
    # row 0: no answer -> 1; row 1: wrong (A<0) -> reweighted; row 2: correct under `wrong` -> 1 but the span
    # rules still hold; row 3: no answer, padded -> 1 then 0 on padding
    scores = torch.tensor([[1.0, 2, 3, 4, 5], [1.0, 1, 1, 1, 1e3], [1.0, 2, 3, 4, 5], [1.0, 2, 3, 4, 5]])
    adv = torch.tensor([-1.0, -1.0, 1.0, -1.0])
    w = grail_weights(scores, span, mask, reweighted_rows(adv, "wrong"), std=0.5, mean=1.0, w_min=0.5, w_max=5.0)
    assert w[0].tolist() == [1.0] * 5
    assert w[2].tolist() == [1.0, 1.0, 5.0, 1.0, 1.0]
    assert w[3].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    # row 1: log scores [0,0,0,0,ln 1000]: mean ln1000/5, std 2 ln1000/5 -> z = -0.5 on the first token
    assert w[1, 0].item() == pytest.approx(1.0 + 0.5 * -0.5, abs=1e-6)
    assert w[1, 1:].tolist() == [1.0, 5.0, 1.0, 1.0]  # marker, content, closing, after
    stats = weight_stats(w, span, mask, reweighted_rows(adv, "wrong"), 5.0)
    assert stats["answer_rate"] == 0.5 and stats["reweighted_rate"] == 0.25
    assert stats["w_cap_share"] == pytest.approx(2 / 18)
    assert stats["w_mean"] == pytest.approx(float(w.sum()) / 18)


def test_weights_never_nan_on_empty_or_constant_rows():
    span = torch.tensor([[SPAN_MARKER, SPAN_CONTENT, SPAN_MARKER, 0], [0, 0, 0, 0]])
    w = grail_weights(torch.zeros(2, 4), span, torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 0]]), torch.ones(2, dtype=bool))
    assert torch.isfinite(w).all()
    assert w[1].tolist() == [0.0] * 4
    assert w[0, 3].item() == pytest.approx(1.0)  # constant saliency: z = 0 -> mean


def test_symmetry():
    adv = torch.tensor([-1.0, 0.0, 2.0])
    assert reweighted_rows(adv, "wrong").tolist() == [True, True, False]
    assert reweighted_rows(adv, "correct").tolist() == [False, False, True]
    assert reweighted_rows(adv, "all").tolist() == [True, True, True]


def test_settings_defaults_are_the_authors_yaml_and_bad_values_are_named():
    s = GrailSettings.from_config({})
    assert (s.std, s.mean, s.w_min, s.w_max, s.rollout_symmetry, s.leaf_source) == (
        0.5, 1.0, 0.5, 5.0, "wrong", "embeddings",
    )
    assert GrailSettings.from_config({"grail_w_max": "3", "grail_leaf_source": "middle"}).w_max == 3.0
    with pytest.raises(ValueError, match="grail_rollout_symmetry"):
        GrailSettings.from_config({"grail_rollout_symmetry": "both_ways"})
    with pytest.raises(ValueError, match="grail_std"):
        GrailSettings.from_config({"grail_std": 0})
    with pytest.raises(ValueError, match="w_min"):
        GrailSettings.from_config({"grail_w_min": 6.0})


# ---------------------------------------------------------------------------------------------- saliency
@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():  # a less uniform model than the random init: scores differ visibly between tokens
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


def reference_scores(model, seq, prompt_len, answer, temperature, leaf_source):
    """Plain autograd on one unpadded sequence, as the authors' phase 1: the embeddings (or a hidden state of
    `output_hidden_states`) as leaf, answer NLL at temperature, ||g * e|| at the positions predicting the response."""
    emb = model.get_input_embeddings()(seq[None]).detach().requires_grad_(True)
    out = model(inputs_embeds=emb, output_hidden_states=True, use_cache=False)
    n_layers = len(out.hidden_states) - 1
    leaf = {"embeddings": emb, "first": out.hidden_states[1], "middle": out.hidden_states[n_layers // 2],
            "last": out.hidden_states[n_layers - 1]}[leaf_source]
    logp = torch.log_softmax(out.logits[0, :-1].float() / temperature, dim=-1)
    token_lp = logp.gather(-1, seq[1:, None]).squeeze(-1)[prompt_len - 1 :]
    loss = -(token_lp * answer.float()).sum()
    (g,) = torch.autograd.grad(loss, leaf)
    pos = slice(prompt_len - 1, len(seq) - 1)
    return (g[0, pos] * leaf[0, pos].detach()).norm(dim=-1)


def make_sequences(vocab, seed=0):
    gen = torch.Generator().manual_seed(seed)
    seqs, prompts, answers = [], [], []
    for p, r, ans in [(5, 7, (2, 5)), (3, 4, None), (6, 9, (6, 9)), (4, 6, (0, 2))]:
        seqs.append(torch.randint(3, vocab, (p + r,), generator=gen))
        prompts.append(p)
        a = torch.zeros(r, dtype=torch.bool)
        if ans:
            a[ans[0] : ans[1]] = True
        answers.append(a)
    return seqs, prompts, answers


def packed_inputs(seqs):
    ids = torch.cat(seqs)[None]
    pos = torch.cat([torch.arange(len(s)) for s in seqs])[None]
    return {"input_ids": ids, "position_ids": pos, "attention_mask": None}


def padded_inputs(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    att = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        att[i, : len(s)] = 1
    pos = torch.arange(width).expand(len(seqs), width).clone()
    return {"input_ids": ids, "position_ids": pos, "attention_mask": att}


@pytest.mark.parametrize("leaf_source", ["embeddings", "last"])
@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_saliency_matches_plain_autograd(tiny_model, layout, leaf_source, checkpointing):
    from verl_bot.hooks.engine_forward_step import response_positions

    model = tiny_model
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    try:
        seqs, prompts, answers = make_sequences(model.config.vocab_size)
        seq_lens = torch.tensor([len(s) for s in seqs])
        resp_lens = seq_lens - torch.tensor(prompts)
        rows, cols, _, _ = response_positions(seq_lens, resp_lens, packed=layout == "packed")
        labels = torch.cat([s[p:] for s, p in zip(seqs, prompts, strict=True)])
        inputs = packed_inputs(seqs) if layout == "packed" else padded_inputs(seqs)
        temps = torch.full((len(labels),), 0.7)
        answer = torch.cat(answers)
        ours = answer_saliency(model, inputs, rows, cols, labels, answer, temps, leaf_source=leaf_source)
        ref = torch.cat([
            reference_scores(model, s, p, a, 0.7, leaf_source)
            for s, p, a in zip(seqs, prompts, answers, strict=True)
        ])
        # rows without an answer: g = 0 there (sequences do not see each other), as in the reference
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-6)
        assert ref.abs().max() > 0
        assert all(p.grad is None for p in model.parameters())  # the attribution touches no parameter gradient
    finally:
        model.gradient_checkpointing_disable()


def test_saliency_without_any_answer_still_runs_the_backward(tiny_model):
    seqs, prompts, _ = make_sequences(tiny_model.config.vocab_size)
    from verl_bot.hooks.engine_forward_step import response_positions

    seq_lens = torch.tensor([len(s) for s in seqs])
    rows, cols, _, _ = response_positions(seq_lens, seq_lens - torch.tensor(prompts), packed=True)
    n = len(rows)
    out = answer_saliency(tiny_model, packed_inputs(seqs), rows, cols, torch.zeros(n, dtype=torch.long),
                          torch.zeros(n, dtype=torch.bool), torch.ones(n))
    assert out.shape == (n,) and not out.any()


# ------------------------------------------------------------------------------------------ start-up checks
def grail_config(*extra):
    from tests.conftest import compose_verl_config

    return compose_verl_config(
        ["algorithm.adv_estimator=grail", "actor_rollout_ref.actor.strategy=fsdp2", *extra]
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["actor_rollout_ref.actor.strategy=fsdp"], r"strategy=fsdp \(FSDP1\).*strategy=fsdp2"),
        (["actor_rollout_ref.actor.strategy=megatron"], "strategy=megatron.*FSDP engine only"),
        (["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"], "Ulysses sequence parallelism"),
        (["actor_rollout_ref.model.use_fused_kernels=true"], "use_fused_kernels=true"),
        (["+algorithm.grail_rollout_symmetry=both_ways"], "grail_rollout_symmetry='both_ways'"),
        (["+algorithm.grail_leaf_source=lm_head"], "grail_leaf_source"),
        (["reward.reward_manager.name=bot", "+reward.reward_kwargs.bot.token_level=true"], "token_level=false"),
    ],
)
def test_unsupported_setups_are_refused_at_start_up_with_one_line(extra, message):
    from verl_bot.errors import VerlBotConfigError
    from verl_bot.launch.preflight import check_config

    with pytest.raises(VerlBotConfigError, match=message) as info:
        check_config(grail_config(*extra))
    assert "\n" not in str(info.value)


def test_supported_setups_pass_the_start_up_checks():
    from verl_bot.errors import VerlBotConfigError
    from verl_bot.launch.preflight import check_config

    check_config(grail_config())
    check_config(grail_config("actor_rollout_ref.actor.use_dynamic_bsz=true", "+algorithm.grail_w_max=3"))
    check_config(grail_config("reward.reward_manager.name=bot", "+reward.reward_kwargs.bot.token_level=false"))
    check_config(grail_config("reward.reward_manager.name=bot"))  # unset: one reward per response
    with pytest.raises(VerlBotConfigError, match="token_level=false"):  # what it refuses: a reward on every token
        check_config(grail_config("reward.reward_manager.name=bot", "+reward.reward_kwargs.bot.token_level=true"))


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_the_lm_head_computes_only_each_answer_positions_own_logits(tiny_model, layout):
    """Padded rows: `logits_to_keep` keeps the union of the answer columns for every row, (R, columns, V); the
    pre-hook leaves the lm_head each answer position's own row only, (1, N_answer, V)."""
    from verl_bot.hooks.engine_forward_step import response_positions

    seqs, prompts, answers = make_sequences(tiny_model.config.vocab_size)
    seq_lens = torch.tensor([len(s) for s in seqs])
    rows, cols, _, _ = response_positions(seq_lens, seq_lens - torch.tensor(prompts), packed=layout == "packed")
    labels = torch.cat([s[p:] for s, p in zip(seqs, prompts, strict=True)])
    answer = torch.cat(answers)
    seen = []
    head = tiny_model.get_output_embeddings().register_forward_hook(lambda m, args, out: seen.append(out.shape))
    try:
        inputs = packed_inputs(seqs) if layout == "packed" else padded_inputs(seqs)
        answer_saliency(tiny_model, inputs, rows, cols, labels, answer, torch.ones(len(labels)))
    finally:
        head.remove()
    # 8 answer tokens (3, 0, 3 and 2 per sequence) in 8 distinct columns; without the pre-hook the padded
    # layout's lm_head would get (4 rows, 8 kept columns): 32 positions of logits
    assert int(answer.sum()) == 8 and len(torch.unique(cols[answer])) == 8
    assert seen == [torch.Size([1, 8, tiny_model.config.vocab_size])]


def test_saliency_is_timed_without_synchronizing_unless_asked(monkeypatch):
    """`grail_update.micro_batch_weights` times the saliency (`saliency_s`) and synchronizes the device around it
    only with `grail_sync_timing=true`: twice per micro-batch."""
    from contextlib import nullcontext

    from verl_bot.actor_needs import MicroBatch
    from verl_bot.advantage import grail_update

    monkeypatch.setattr(grail_update, "answer_saliency", lambda *args, **kwargs: torch.ones(3))
    calls = []
    mb = MicroBatch(module=None, model_inputs={}, rows=torch.zeros(3, dtype=torch.long), cols=torch.arange(3),
                    labels=torch.zeros(3, dtype=torch.long), temperature=torch.ones(3), lengths=torch.tensor([3]),
                    masks=[torch.ones(3)], advantages=[torch.ones(3)], fields={SPAN_FIELD: [torch.zeros(3)]},
                    autocast=nullcontext, synchronize=lambda: calls.append(1))
    for sync, expected in ((False, 0), (True, 2)):
        calls.clear()
        weights, stats = grail_update.micro_batch_weights(mb, {**GrailSettings().as_dict(), "sync_timing": sync})
        assert len(calls) == expected and stats["saliency_s"] >= 0 and weights[0].tolist() == [1.0, 1.0, 1.0]
    assert GrailSettings.from_config({"grail_sync_timing": True}).sync_timing is True
    with pytest.raises(ValueError, match="grail_sync_timing='yes': must be true or false"):
        GrailSettings.from_config({"grail_sync_timing": "yes"})
