"""A warm start for the React recipes on the CPU: the tiny model learns to answer a React prompt with a component.

A randomly initialised tiny model never writes a ```tsx fence, so the React reward server would stop at
"not a component" and never bundle, lint, render or ask its judges anything. For the CPU runs of the React
recipes (`PLATFORM=cpu`, `SMOKE=1` on a machine without a GPU: verl_bot/recipes/), the model is warm-started
on the prompts the recipe trains on (the chat prompts of its train parquet) answered with one of a few short
components (`COMPONENTS`: valid TSX with Tailwind classes; one has an ESLint error, a list without keys).
Sampled at temperature 1 it writes such components with mistakes, so the whole reward stack works on what it
writes: esbuild, ESLint, Chromium, the LLM judge. Ours, for the CPU runs only; not a React task to learn.

    python -m verl_bot_demo.tiny_model OUT_DIR --warm-start react --prompts DATA_DIR/train.parquet
"""

from __future__ import annotations

import random
from pathlib import Path

COMPONENTS = [
    'export default function App() {\n  return <div className="p-4 text-lg">Hello</div>;\n}',
    'import { useState } from "react";\n\nexport default function Counter() {\n  const [n, setN] = useState(0);\n'
    '  return <button className="rounded p-2" onClick={() => setN(n + 1)}>{n}</button>;\n}',
    'const items = ["a", "b", "c"];\n\nexport default function List() {\n  return (\n    <ul className="p-4">\n'
    '      {items.map((item) => (\n        <li key={item}>{item}</li>\n      ))}\n    </ul>\n  );\n}',
    'import { useState } from "react";\n\nexport default function Toggle() {\n  const [on, setOn] = useState(false);\n'
    '  return <button className="p-2" onClick={() => setOn(!on)}>{on ? "On" : "Off"}</button>;\n}',
    'const items = ["x", "y"];\n\nexport default function Tags() {\n  return (\n    <div className="flex gap-2">\n'
    '      {items.map((item) => (\n        <span>{item}</span>\n      ))}\n    </div>\n  );\n}',
]


def fenced(code: str) -> str:
    return f"```tsx\n{code}\n```"


def prompts(parquet: str | Path) -> list[str]:
    """The user messages of a verl parquet's chat `prompt` column (one per row)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(parquet, columns=["prompt"]).column("prompt").to_pylist()
    return ["\n".join(m["content"] for m in chat if m.get("role") == "user") for chat in rows]


def tokenizer_corpus(texts: list[str]) -> list[str]:
    """Lines that teach the tokenizer's BPE the prompts' and the components' text."""
    return texts[:32] + [fenced(c) for c in COMPONENTS]


DRAFT_SHARE = 0.3  # a reasoning family's think blocks that hold a fenced draft of another component
LONG_THINK_SHARE = 0.15  # think blocks long enough to be cut off at the smokes' length cap


def respond(rng: random.Random, family=None) -> str:
    """A random component, fenced, in `family`'s output style (`verl_bot.launch.families.Family`; None: the fence
    alone):
    a reasoning family thinks first, sometimes over a fenced draft, sometimes long enough to be cut off."""
    answer = fenced(rng.choice(COMPONENTS))
    if family is None or not family.thinks:
        return answer
    lines = ["The user wants a component. I will write it in TSX with Tailwind classes."]
    if rng.random() < DRAFT_SHARE:
        lines.append(f"A draft:\n{fenced(rng.choice(COMPONENTS))}")
    if rng.random() < LONG_THINK_SHARE:
        lines += ["Let me think about the layout again."] * 16
    return family.respond("\n\n".join(lines), answer)


def warm_start(
    model, tokenizer, texts: list[str], seed: int = 0, steps: int = 150, batch_size: int = 8, lr: float = 1e-2,
    family=None, template_kwargs: dict | None = None, end_token_id: int | None = None,
) -> dict:
    """Supervised pre-training of `model` in place: each of the prompts `texts` answered with a random component
    of `COMPONENTS` (`verl_bot_demo.pretrain.supervised`; deterministic for `seed`), in `family`'s output style
    (`respond`), its prompts rendered with `template_kwargs` and ended by `end_token_id`. Returns a summary."""
    from verl_bot_demo.pretrain import loss_summary, supervised

    def examples(rng: random.Random) -> list[tuple[str, str]]:
        return [(rng.choice(texts), respond(rng, family)) for _ in range(batch_size)]

    losses = supervised(model, tokenizer, examples, seed=seed, steps=steps, lr=lr, template_kwargs=template_kwargs,
                        end_token_id=end_token_id)
    return {"task": "react", "seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr,
            "components": len(COMPONENTS), **loss_summary(losses)}

