"""The `bot` manager's bench: verl's reward-loop worker with the manager (`worker_for`), a batch as verl builds it
(`make_batch`), and the slow references of the token rewards, written from the tokenizer's decoding and the
REWARD_API alone (none of verl_bot.credit's span mapping): the characters each token produced, the per-token local
signal S_t of a verdict's `local` spans, toy_lint's credit. They are checked by hand in tests/unit/test_reference.py
and tests/component/test_reward_manager.py."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

from tests.conftest import compose_verl_config

PROMPT = [{"role": "user", "content": "Write without vowels."}]
VOWELS = "aeiou"  # toy_lint's default forbidden characters


def make_batch(tokenizer, responses, data_source="toy_lint", uids=None, pad_to=24):
    """A right-padded DataProto like verl's: prompts (B, P), responses (B, T), attention_mask (B, P+T)."""
    prompt_text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    rows = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    width = max(pad_to, max(len(r) for r in rows))
    responses_t = torch.full((len(rows), width), tokenizer.pad_token_id)
    response_attn = torch.zeros(len(rows), width, dtype=torch.long)
    for i, ids in enumerate(rows):
        responses_t[i, : len(ids)] = torch.tensor(ids)
        response_attn[i, : len(ids)] = 1
    prompts = torch.tensor([prompt_ids] * len(rows))
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses_t,
            "attention_mask": torch.cat([torch.ones_like(prompts), response_attn], dim=1),
        },
        batch_size=len(rows),
    )
    n = len(rows)
    non_tensor = {
        "data_source": np.array([data_source] * n, dtype=object),
        "reward_model": np.array([{"style": "rule", "ground_truth": None}] * n, dtype=object),
        "extra_info": np.array([{"index": i} for i in range(n)], dtype=object),
        "raw_prompt": np.array([PROMPT] * n + [None], dtype=object)[:n],
        "uid": np.array(uids if uids is not None else ["g0"] * n, dtype=object),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor), rows


def worker_for(tiny_model_dir, *extra):
    """verl's reward-loop worker with the `bot` manager, for `bot` (its dense rewards) unless `extra` says otherwise."""
    config = compose_verl_config(
        [f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot",
         "algorithm.adv_estimator=bot", *extra]
    )
    return RewardLoopWorker(config), config


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


def reference_coverage(tokenizer, ids):
    """Slow reference of the characters each token produced, from the tokenizer's decoding alone (none of verl_bot's
    span mapping): `[start, end)` per token in `tokenizer.decode(ids, skip_special_tokens=True)`.

    Token t covers what decoding ids[:t+1] adds to decoding ids[:t] (a decode ending in an unfinished character
    drops its U+FFFD); a non-special token that completes no character covers those of the next token that does; a
    special token (EOS) covers none."""
    covered, done = [], 0
    for t in range(len(ids)):
        prefix = tokenizer.decode(ids[: t + 1], skip_special_tokens=True)
        prefix = prefix.rstrip("\ufffd") if t + 1 < len(ids) else prefix
        covered.append((done, max(done, len(prefix))))
        done = max(done, len(prefix))
    special = set(tokenizer.all_special_ids)
    for t in range(len(ids)):
        if covered[t][0] == covered[t][1] and ids[t] not in special:
            covered[t] = next((c for c in covered[t + 1 :] if c[1] > c[0]), covered[t])
    return covered


def token_local(tokenizer, ids: Sequence[int], local: Sequence[dict]) -> np.ndarray:
    """(len(ids),) S_t the slow way: each character's S is the sum of the values of the `local` spans holding it (a
    span clipped to the text), each token's S_t the mean over the characters it covers (`reference_coverage`), 0 for
    a token with none."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    per_char = [sum(float(s["value"]) for s in local if max(0, int(s["start"])) <= c < min(len(text), int(s["end"])))
                for c in range(len(text))]
    return np.array([sum(per_char[a:b]) / (b - a) if b > a else 0.0 for a, b in reference_coverage(tokenizer, ids)])


def reference_credit(tokenizer, ids):
    """Slow reference of toy_lint's credit on the token ids `ids` (`reference_coverage`): (G, [S_t per token]).

    G = 1 - 2 * vowels / non-space characters (-1 for an empty text); S = -1 on every vowel; S_t is the mean of S
    over the token's characters, 0 for none."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    visible = [c for c in text if not c.isspace()]
    g = 1.0 - 2.0 * sum(c in VOWELS for c in visible) / len(visible) if visible else -1.0
    chars = [text[start:end] for start, end in reference_coverage(tokenizer, ids)]
    return g, [-sum(c in VOWELS for c in piece) / len(piece) if piece else 0.0 for piece in chars]


def reference_token_rewards(tokenizer, ids, w_global=1.0, w_local=1.0, shift=0.0):
    """`w_g * (G + shift) + w_s * S_t` of `reference_credit` (`shift`: what shaping adds to G)."""
    g, local = reference_credit(tokenizer, ids)
    return [w_global * (g + shift) + w_local * s for s in local]
