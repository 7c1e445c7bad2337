"""The CPU task `toy_calc`: toy_math's problems solved with a calculator tool, over two assistant turns.

A problem is a `toy_math` chain ("Compute 3+4-2.", `verl_bot.cpu.toy_math`); the model has one tool, `calc`
(`verl_bot/cpu/calc_tool.py`, a verl function tool), which verl's `ToolAgentLoop` calls when the model writes a
hermes tool call. A worked rollout (response tokens; `|` marks where the mask switches):

    <tool_call>{"name": "calc", "arguments": {"expression": "3+4-2"}}</tool_call><|im_end|>      turn 0 (mask 1)
    | \\n<|im_start|>tool\\n5<|im_end|>\\n<|im_start|>assistant\\n |                              tool context (mask 0)
    <final>5</final><|im_end|>                                                                turn 1 (mask 1)

It is scored by `verl_bot.rewards.builtin.toy_calc` with a value per turn: G = 1[final answer correct], turn 0
+-0.5 (the expression it sent is the problem's), the last turn +-0.5 (its answer is what the tool returned).

`warm_start` gives the tiny model a short supervised pre-training on such chats (`pretrain.supervised_chat`:
labels on the assistant tokens and their EOS only) with noise a reward can remove: a share `wrong_call` of the
tool calls carry a wrong expression (one number changed), a share `ignore_tool` of the final answers ignore the
tool's output (another digit).

    python -m verl_bot.cpu.tiny_model OUT_DIR --warm-start toy_calc
"""

from __future__ import annotations

import random

from verl_bot.cpu.toy_math import MAX_OPS, MAX_VALUE, MIN_OPS, Problem, sample_problem
from verl_bot.rewards.calc import evaluate, tool_call

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
    `verl_bot.cpu.pretrain.supervised_chat`). Deterministic for `seed`. Returns a summary (final loss, settings)."""
    from verl_bot.cpu.pretrain import loss_summary, supervised_chat

    def examples(rng: random.Random) -> list[list[dict]]:
        problems = [sample_problem(rng, MIN_OPS, MAX_OPS) for _ in range(batch_size)]
        return [[{"role": "user", "content": p.prompt}, *chat(p, rng, wrong_call, ignore_tool)] for p in problems]

    losses = supervised_chat(model, tokenizer, examples, seed=seed, steps=steps, lr=lr)
    return {"task": "toy_calc", "seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr,
            "wrong_call": wrong_call, "ignore_tool": ignore_tool, **loss_summary(losses)}
