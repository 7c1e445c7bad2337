"""The CPU task `toy_math`: short integer arithmetic chains in the AIME task's step format, and the warm start.

The problem generator (a chain of single-digit integers joined by `+` and `-`, running value in 0..9, ground truth
the value), the worked solutions (one operation per `<step k>` block, steps separated by a blank line, then
`<final>v</final>`), and `warm_start`: a short supervised pre-training (deterministic for a seed) on solutions in
which a share `error_rate` of the steps state a wrong result, so the base model writes the format but makes
mistakes a reward can remove. Scored like AIME (`verl_bot_demo.scorers`). The task:
docs/cpu_demo.md, section A second CPU task: `toy_math`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

MAX_VALUE = 9  # every number of a problem and of its steps is one digit (one token)
MIN_OPS, MAX_OPS = 2, 4  # operations (= steps) per problem
MAX_STEPS = 8  # step tags the tokenizer knows as single tokens
TAG_TOKENS = [
    *(f"<step {i}>" for i in range(1, MAX_STEPS + 1)),
    *(f"</step {i}>" for i in range(1, MAX_STEPS + 1)),
    "<final>",
    "</final>",
]
STEP_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Problem:
    """A chain `start op_1 b_1 op_2 b_2 ...`, evaluated left to right."""

    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def expression(self) -> str:
        return f"{self.start}" + "".join(f"{op}{b}" for op, b in self.ops)

    @property
    def prompt(self) -> str:
        return f"Compute {self.expression}."

    def values(self) -> list[int]:
        """The running value after each operation; `values()[-1]` is the answer."""
        out, v = [], self.start
        for op, b in self.ops:
            v = v + b if op == "+" else v - b
            out.append(v)
        return out

    @property
    def answer(self) -> int:
        return self.values()[-1]


def sample_problem(rng: random.Random, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS) -> Problem:
    """A random chain of `min_ops`..`max_ops` operations on digits 1-9 whose running value stays in 0..9."""
    n = rng.randint(min_ops, max_ops)
    start = rng.randint(1, MAX_VALUE)
    ops, v = [], start
    for _ in range(n):
        choices = [("+", b) for b in range(1, MAX_VALUE - v + 1)] + [("-", b) for b in range(1, v + 1)]
        op, b = rng.choice(choices)
        v = v + b if op == "+" else v - b
        ops.append((op, b))
    return Problem(start, tuple(ops))


def solution(problem: Problem, rng: random.Random | None = None, error_rate: float = 0.0) -> str:
    """A worked solution; each step's result is wrong with probability `error_rate` (a uniformly drawn other
    digit), later steps continue from the stated value, and the final answer is the last stated value."""
    lines, a = [], problem.start
    for i, (op, b) in enumerate(problem.ops, 1):
        c = a + b if op == "+" else a - b
        if rng is not None and error_rate > 0 and rng.random() < error_rate:
            c = rng.choice([d for d in range(MAX_VALUE + 1) if d != c])
        lines.append(f"<step {i}>{a}{op}{b}={c}</step {i}>")
        a = c
    return STEP_SEPARATOR.join([*lines, f"<final>{a}</final>"])


def problems(count: int, seed: int, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS) -> list[Problem]:
    """`count` problems, deterministic for `seed`."""
    rng = random.Random(seed)
    return [sample_problem(rng, min_ops, max_ops) for _ in range(count)]


def tokenizer_corpus(count: int = 64, seed: int = 0) -> list[str]:
    """Lines that teach the tokenizer's BPE this task's text (prompts and worked solutions)."""
    rng = random.Random(seed)
    out = []
    for p in problems(count, seed):
        out += [p.prompt, solution(p, rng, 0.2)]
    return out


# A reasoning family's output (`Family.thinks`, Phi-4-mini-reasoning): a think block, then the answer
NATIVE_SHARE = 0.3  # answers in the native style, `\boxed{v}` without step tags (the rest: tags, as asked)
DRAFT_SHARE = 0.3  # think blocks that hold a draft of a tagged step, or of a boxed answer
LONG_THINK_SHARE = 0.15  # think blocks long enough to be cut off at the smokes' length cap (160 tokens)


def thought(answer: str, rng: random.Random) -> str:
    """The think block's text for a problem whose worked solution is `answer`: its operations in a line, as the
    answer states them; sometimes with a draft of its first step tag or of its boxed answer, sometimes run on long
    enough to be cut off at the smokes' length cap."""
    steps = [re.sub(r"</?step \d+>", "", line) for line in answer.split(STEP_SEPARATOR)[:-1]]
    lines = [", then ".join(steps) + "."]
    draw = rng.random()
    if draw < DRAFT_SHARE / 2:
        lines.append(f"Draft: {answer.split(STEP_SEPARATOR)[0]}")
    elif draw < DRAFT_SHARE:
        lines.append(f"So maybe \\boxed{{{FINAL.search(answer).group(1)}}}.")
    if rng.random() < LONG_THINK_SHARE:
        lines += ["Let me check again."] * 16
    return "\n\n".join(lines)


def respond(problem: Problem, rng: random.Random, error_rate: float, family=None) -> str:
    """A worked solution in `family`'s output style (`verl_bot.launch.families.Family`; None: the tagged solution)."""
    answer = solution(problem, rng, error_rate)
    if family is None or not family.thinks:
        return answer
    think = thought(answer, rng)
    if rng.random() < NATIVE_SHARE:
        answer = f"The answer is \\boxed{{{FINAL.search(answer).group(1)}}}."
    return family.respond(think, answer)


FINAL = re.compile(r"<final>(.*?)</final>")


def warm_start(
    model,
    tokenizer,
    seed: int = 0,
    steps: int = 1200,
    batch_size: int = 64,
    lr: float = 1e-2,
    error_rate: float = 0.25,
    min_ops: int = MIN_OPS,
    max_ops: int = MAX_OPS,
    prompt_template: str = "{problem}",
    family=None,
    template_kwargs: dict | None = None,
    end_token_id: int | None = None,
) -> dict:
    """Supervised pre-training of `model` in place on worked solutions with wrong steps (see the module docstring;
    the loop is `verl_bot_demo.pretrain.supervised`). Deterministic for `seed` (problems, injected errors, batch
    order and the torch RNG). `prompt_template`: the user message around the problem ("Compute 3+4-2."), e.g.
    the AIME recipes' instruction (`prompt_template_of`). `family` (`verl_bot.launch.families.Family`),
    `template_kwargs`,
    `end_token_id`: a family's output style (`respond`), template options and end of turn. Returns a summary
    (final loss, settings)."""
    from verl_bot_demo.pretrain import loss_summary, supervised

    def examples(rng: random.Random) -> list[tuple[str, str]]:
        batch = [sample_problem(rng, min_ops, max_ops) for _ in range(batch_size)]
        return [(prompt_template.format(problem=p.prompt), respond(p, rng, error_rate, family)) for p in batch]

    losses = supervised(model, tokenizer, examples, seed=seed, steps=steps, lr=lr, template_kwargs=template_kwargs,
                        end_token_id=end_token_id)
    return {
        "task": "toy_math",
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "error_rate": error_rate,
        "ops": [min_ops, max_ops],
        **({"prompt_template": prompt_template} if prompt_template != "{problem}" else {}),
        **({"style": "think, then the answer"} if family is not None and family.thinks else {}),
        **loss_summary(losses),
    }


def prompt_template_of(parquet: str | Path) -> str:
    """The user message of a verl parquet's first row with its problem (`extra_info.problem`, as
    recipes/data/aime.py writes it) replaced by `{problem}`: the wording the warm start then trains on."""
    import pyarrow.parquet as pq

    row = pq.read_table(parquet, columns=["prompt", "extra_info"]).slice(0, 1).to_pylist()[0]
    message = "\n".join(m["content"] for m in row["prompt"] if m.get("role") == "user")
    problem = (row.get("extra_info") or {}).get("problem")
    if not problem or problem not in message:
        raise ValueError(f"{parquet}: its first row's prompt does not contain its extra_info.problem")
    return message.replace("{", "{{").replace("}", "}}").replace(problem, "{problem}")
