"""The CPU task `toy_turns`: toy_calc's calculator, but the model chooses how many turns it takes.

Its verl rows (`rows`; `recipes/data/toy_turns.py` writes them) are toy_calc's with `data_source=toy_turns`.

A problem is a chain of 1-4 single-digit operations ("Compute 3+4-2.", `verl_bot_demo.toy_math`); the model may
answer at once (one turn), call `calc` (`verl_bot_demo/calc_tool.py`) and answer after its reply (two turns), or
call it again before answering (three or more; verl's `ToolAgentLoop` ends a rollout at the first turn without a
tool call, or at `max_assistant_turns`). An extra call can help (the first call with the problem's expression: the
answer is then the tool's) or hurt (a repeated or wrong call: a wasted turn). Scored per turn by
`verl_bot_demo.scorers.toy_turns`: G = 1[final answer correct]; each call turn +0.5 when it sends the problem's
expression for the first time, else -0.5; the answer turn +0.5 when it answers the last reply of the tool, -0.5
when it does not, 0 when no tool was called.

`warm_start` gives the tiny model a supervised pre-training on such chats (`pretrain.supervised_chat`, labels on
the assistant turns) mixing the behaviours: a share `direct` answer at once (right on one-operation problems,
right with probability `guess` on longer ones), a share `repeat` call twice with the same expression, the rest
call once; a share `wrong_call` of the calls send a wrong expression, a share `ignore_tool` of the answers after a
call ignore the tool's reply.

    python -m verl_bot_demo.tiny_model OUT_DIR --warm-start toy_turns
"""

from __future__ import annotations

import random

from verl_bot_demo.calc import evaluate, tool_call
from verl_bot_demo.toy_calc import TAG_TOKENS, perturbed
from verl_bot_demo.toy_math import MAX_OPS, MAX_VALUE, Problem, problems, sample_problem

__all__ = ["TAG_TOKENS", "chat", "rows", "tokenizer_corpus", "warm_start"]
MIN_OPS = 1  # one-operation problems: where answering at once is as good as calling


def _other_digit(value: str, rng: random.Random) -> str:
    return str(rng.choice([d for d in range(MAX_VALUE + 1) if str(d) != value]))


def chat(problem: Problem, rng: random.Random, direct: float = 0.0, repeat: float = 0.0, wrong_call: float = 0.0,
         ignore_tool: float = 0.0, guess: float = 0.3) -> list[dict]:
    """The messages after the user's, in one of the behaviours of the module docstring (drawn from `rng`)."""
    truth = str(problem.answer)
    draw = rng.random()
    if draw < direct:
        right = len(problem.ops) == 1 or rng.random() < guess
        return [{"role": "assistant", "content": f"<final>{truth if right else _other_digit(truth, rng)}</final>"}]
    expression = perturbed(problem, rng) if rng.random() < wrong_call else problem.expression
    result = evaluate(expression)
    call = [{"role": "assistant", "content": tool_call(expression)}, {"role": "tool", "content": result}]
    answer = _other_digit(result, rng) if rng.random() < ignore_tool else result
    return call * (2 if draw < direct + repeat else 1) + [{"role": "assistant", "content": f"<final>{answer}</final>"}]


def rows(count: int, seed: int, split: str) -> list[dict]:
    """`count` verl parquet rows (deterministic for `seed`): `data_source`, `prompt` (chat list), `ability`,
    `reward_model` {style, ground_truth: the answer as text}, `extra_info` {index, split, expression}."""
    return [{"data_source": "toy_turns", "prompt": [{"role": "user", "content": p.prompt}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(p.answer)},
             "extra_info": {"index": i, "split": split, "expression": p.expression}}
            for i, p in enumerate(problems(count, seed, MIN_OPS, MAX_OPS))]


def tokenizer_corpus(count: int = 64, seed: int = 0) -> list[str]:
    """Lines that teach the tokenizer's BPE this task's text (prompts, tool calls, answers)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        problem = sample_problem(rng, MIN_OPS, MAX_OPS)
        out += [problem.prompt, *(m["content"] for m in chat(problem, rng, 0.3, 0.2, 0.2, 0.1))]
    return out


def warm_start(model, tokenizer, seed: int = 0, steps: int = 1200, batch_size: int = 32, lr: float = 1e-2,
               direct: float = 0.3, repeat: float = 0.2, wrong_call: float = 0.2, ignore_tool: float = 0.1,
               guess: float = 0.3) -> dict:
    """Supervised pre-training of `model` in place on chats of every behaviour (module docstring; the loop is
    `verl_bot_demo.pretrain.supervised_chat`). Deterministic for `seed`. Returns a summary (final loss, settings)."""
    from verl_bot_demo.pretrain import loss_summary, supervised_chat

    def examples(rng: random.Random) -> list[list[dict]]:
        problems = [sample_problem(rng, MIN_OPS, MAX_OPS) for _ in range(batch_size)]
        return [[{"role": "user", "content": p.prompt}, *chat(p, rng, direct, repeat, wrong_call, ignore_tool, guess)]
                for p in problems]

    losses = supervised_chat(model, tokenizer, examples, seed=seed, steps=steps, lr=lr)
    settings = {"direct": direct, "repeat": repeat, "wrong_call": wrong_call, "ignore_tool": ignore_tool,
                "guess": guess}
    return {"task": "toy_turns", "seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr, **settings,
            **loss_summary(losses)}
