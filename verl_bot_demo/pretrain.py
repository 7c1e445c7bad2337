"""Supervised warm start of a tiny model: what the CPU tasks' models learn before RL (`--warm-start`).

`supervised(model, tokenizer, examples, ...)` trains `model` in place on (prompt, response) pairs drawn by
`examples(rng)` for each step: each example is the chat-templated prompt (as verl renders it:
`add_generation_prompt=True`, with the run's template options) followed by the response and the token that ends
a response (the EOS token, or the family's end of turn); the loss is the mean cross-entropy
over the response and EOS tokens. Deterministic for the seed (the pairs, the batch order and the torch RNG),
single-threaded (a 100k-parameter model gains nothing from more threads; on a loaded machine two are ~10x
slower). Used by `verl_bot_demo.toy_math` and `verl_bot_demo.toy_react`.

`supervised_chat(model, tokenizer, chats, ...)` is the same loop on whole multi-turn chats (the tool task
`verl_bot_demo.toy_calc`): labels on the assistant turns and their EOS only, as verl's response mask trains them.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def supervised(
    model,
    tokenizer,
    examples: Callable[[random.Random], list[tuple[str, str]]],
    seed: int,
    steps: int,
    lr: float,
    template_kwargs: dict | None = None,
    end_token_id: int | None = None,
    batch_fn: Callable[..., dict] | None = None,
) -> list[float]:
    """Train `model` for `steps` AdamW steps on `examples(rng)` batches (warm-up 20 steps, linear decay); returns
    the loss of every step. `template_kwargs`: the chat template's options verl renders the prompts with (e.g.
    SmolLM3's `enable_thinking`); `end_token_id`: the token that ends a response (default: the tokenizer's EOS);
    `batch_fn`: builds a batch's tensors from `(tokenizer, examples, template_kwargs, end_token_id)` (default:
    prompt-response pairs, `_batch`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        rng = random.Random(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / 20) * (1 - i / steps))
        model.train()
        losses = []
        for _ in range(steps):
            loss = model(**(batch_fn or _batch)(tokenizer, examples(rng), template_kwargs or {}, end_token_id)).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        model.eval()
        return losses
    finally:
        torch.set_num_threads(threads)


def _batch(tokenizer, pairs: list[tuple[str, str]], template_kwargs: dict, end_token_id: int | None) -> dict:
    """input_ids / attention_mask / labels (prompt tokens and padding masked with -100), right-padded."""
    prompts = tokenizer(
        [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False,
                                          **template_kwargs)
            for p, _ in pairs
        ],
        add_special_tokens=False,
    )["input_ids"]
    answers = tokenizer([r for _, r in pairs], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id if end_token_id is None else end_token_id
    return _padded(tokenizer, [(q + a + [eos], [-100] * len(q) + a + [eos]) for q, a in zip(prompts, answers,
                                                                                             strict=True)])


def _padded(tokenizer, rows: list[tuple[list[int], list[int]]]) -> dict:
    """input_ids / attention_mask / labels tensors of (ids, labels) rows, right-padded (labels with -100)."""
    import torch

    ids = [x for x, _ in rows]
    labels = [y for _, y in rows]
    width = max(len(x) for x in ids)
    return {
        "input_ids": torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in ids]),
        "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
        "labels": torch.tensor([y + [-100] * (width - len(y)) for y in labels]),
    }


def supervised_chat(model, tokenizer, examples: Callable[[random.Random], list[list[dict]]], seed: int, steps: int,
                    lr: float) -> list[float]:
    """`supervised` on whole chats (`examples(rng)`: a batch of message lists, the user's first): labels on the
    assistant messages' tokens and the EOS that ends each, none on the prompt, the tool messages and the chat
    template's own tokens between them (as verl's multi-turn response mask has them)."""
    return supervised(model, tokenizer, examples, seed, steps, lr, batch_fn=_chat_batch)


def _chat_ids(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """A chat's ids and labels: each message's part of the ChatML rendering (the rendering of the messages up to it
    minus that of those before it, the next assistant's generation prompt included); an assistant part's content
    and EOS are labelled, the rest (the template's newline after the EOS, tool parts) is not."""
    eos = tokenizer.eos_token
    ids, labels, before = [], [], ""
    for k, message in enumerate(messages):
        upto = tokenizer.apply_chat_template(messages[: k + 1], tokenize=False,
                                             add_generation_prompt=k + 1 < len(messages)
                                             and messages[k + 1]["role"] == "assistant")
        part, before = upto[len(before):], upto
        trained = ""
        if message["role"] == "assistant":
            trained = message["content"] + eos
            if not part.startswith(trained):
                raise ValueError(f"the chat template does not render an assistant message as content + EOS: {part!r}")
            part = part[len(trained):]
            trained_ids = tokenizer(trained, add_special_tokens=False)["input_ids"]
            ids += trained_ids
            labels += trained_ids
        rest = tokenizer(part, add_special_tokens=False)["input_ids"]
        ids += rest
        labels += [-100] * len(rest)
    return ids, labels


def _chat_batch(tokenizer, chats: list[list[dict]], *_unused) -> dict:
    """input_ids / attention_mask / labels of whole chats (`_chat_ids`), right-padded."""
    return _padded(tokenizer, [_chat_ids(tokenizer, messages) for messages in chats])


def loss_summary(losses: list[float]) -> dict:
    """The final loss (mean of the last 10 steps) and every 25th step's loss."""
    return {
        "final_loss": sum(losses[-10:]) / min(10, len(losses)),
        "loss_every_25": [round(x, 4) for x in losses[::25]],
    }
