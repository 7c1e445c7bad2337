"""The CPU task `toy_calc`: toy_math's problems solved with a calculator tool, over two assistant turns.

A worked rollout, through verl's `ToolAgentLoop` and the `calc` tool (`verl_bot_demo/calc_tool.py`); `|` marks where
the response mask switches:

    <tool_call>{"name": "calc", "arguments": {"expression": "3+4-2"}}</tool_call><|im_end|>      turn 0 (mask 1)
    | \\n<|im_start|>tool\\n5<|im_end|>\\n<|im_start|>assistant\\n |                              tool context (mask 0)
    <final>5</final><|im_end|>                                                                turn 1 (mask 1)

`warm_start` pre-trains the tiny model on such chats (labels on the assistant turns and their EOS only), a share
`wrong_call` of the calls with a wrong expression and `ignore_tool` of the answers ignoring the tool. The task, its
per-turn scores: docs/cpu_demo.md, section The tool task: `toy_calc`.
"""

from __future__ import annotations

import random

from verl_bot_demo.calc import evaluate, tool_call
from verl_bot_demo.toy_math import MAX_OPS, MAX_VALUE, MIN_OPS, Problem, sample_problem

TAG_TOKENS = ["<tool_call>", "</tool_call>", "<final>", "</final>"]


def perturbed(problem: Problem, rng: random.Random) -> str:
    """`problem`'s expression with one of its numbers changed to another digit."""
    numbers = [problem.start, *(b for _, b in problem.ops)]
    k = rng.randrange(len(numbers))
    numbers[k] = rng.choice([d for d in range(1, MAX_VALUE + 1) if d != numbers[k]])
    return f"{numbers[0]}" + "".join(f"{op}{b}" for (op, _), b in zip(problem.ops, numbers[1:], strict=True))


def chat(problem: Problem, rng: random.Random, wrong_call: float = 0.0, ignore_tool: float = 0.0) -> list[dict]:
    """The messages after the user's: the tool call (its expression wrong with probability `wrong_call`), the
    tool's answer, the final answer (another digit than the tool's with probability `ignore_tool`)."""
    expression = perturbed(problem, rng) if rng.random() < wrong_call else problem.expression
    result = evaluate(expression)
    answer = result
    if rng.random() < ignore_tool:
        answer = str(rng.choice([d for d in range(MAX_VALUE + 1) if str(d) != result]))
    return [
        {"role": "assistant", "content": tool_call(expression)},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": f"<final>{answer}</final>"},
    ]


def tokenizer_corpus(count: int = 64, seed: int = 0) -> list[str]:
    """Lines that teach the tokenizer's BPE this task's text (prompts, tool calls, answers)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        problem = sample_problem(rng)
        out += [problem.prompt, *(m["content"] for m in chat(problem, rng, 0.2, 0.2))]
    return out


def warm_start(
    model,
    tokenizer,
    seed: int = 0,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 1e-2,
    wrong_call: float = 0.2,
    ignore_tool: float = 0.2,
) -> dict:
    """Supervised pre-training of `model` in place on tool chats with noise (see the module docstring; the loop is
    `verl_bot_demo.pretrain.supervised_chat`). Deterministic for `seed`. Returns a summary (final loss, settings)."""
    from verl_bot_demo.pretrain import loss_summary, supervised_chat

    def examples(rng: random.Random) -> list[list[dict]]:
        problems = [sample_problem(rng, MIN_OPS, MAX_OPS) for _ in range(batch_size)]
        return [[{"role": "user", "content": p.prompt}, *chat(p, rng, wrong_call, ignore_tool)] for p in problems]

    losses = supervised_chat(model, tokenizer, examples, seed=seed, steps=steps, lr=lr)
    return {"task": "toy_calc", "seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr,
            "wrong_call": wrong_call, "ignore_tool": ignore_tool, **loss_summary(losses)}
