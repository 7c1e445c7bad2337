"""Write the `toy_math` task as verl parquet: `train.parquet` and `test.parquet`.

The task has the shape of the AIME one (a ground-truth answer, `<step i>` steps and a `<final>` answer, a step
judge with error propagation) on problems a tiny model can learn on a CPU: integer arithmetic chains of single
digits such as "Compute 3+4-2." (`verl_bot_demo.toy_math`), scored by `verl_bot_demo.scorers.toy_math`. Rows
follow verl's preprocessors: `data_source`, `prompt` (chat list), `ability`, `reward_model` {style,
ground_truth (the answer as a string)}, `extra_info`. Train and test problems come from different seeds.

    python recipes/data/toy_math.py --out DIR [--train 512] [--test 64] [--seed 0] [--min-ops 2] [--max-ops 4]

`--aime-jsonl FILE` writes `--train` problems in the AIME file format instead (the `id`, `year`, `problem`,
`answer` records `recipes/data/aime.py --input` reads): the AIME recipes' data on the CPU platform,
`recipes/data/aime_cpu.jsonl`, is `--aime-jsonl recipes/data/aime_cpu.jsonl --train 80 --seed 7`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from verl_bot_demo.toy_math import MAX_OPS, MIN_OPS, problems  # noqa: E402


def rows(count: int, seed: int, split: str, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS) -> list[dict]:
    """`count` verl rows of the toy_math task (deterministic for `seed`)."""
    return [
        {
            "data_source": "toy_math",
            "prompt": [{"role": "user", "content": p.prompt}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(p.answer)},
            "extra_info": {"index": i, "split": split, "expression": p.expression, "steps": len(p.ops)},
        }
        for i, p in enumerate(problems(count, seed, min_ops, max_ops))
    ]


def aime_records(count: int, seed: int, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS) -> list[dict]:
    """`count` toy_math problems as AIME file records (deterministic for `seed`)."""
    return [
        {"id": f"toy-{i}", "year": 2000, "problem": p.prompt, "answer": str(p.answer)}
        for i, p in enumerate(problems(count, seed, min_ops, max_ops), start=1)
    ]


def main() -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", help="folder of train.parquet and test.parquet")
    target.add_argument("--aime-jsonl", help="one file of AIME-format records instead (--train of them)")
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="train problems; test problems use seed + 1")
    parser.add_argument("--min-ops", type=int, default=MIN_OPS)
    parser.add_argument("--max-ops", type=int, default=MAX_OPS, help="must match the warm start's (default both 4)")
    args = parser.parse_args()
    if not 1 <= args.min_ops <= args.max_ops <= 8:
        parser.error("need 1 <= --min-ops <= --max-ops <= 8")
    ops = (args.min_ops, args.max_ops)
    if args.aime_jsonl:
        lines = [json.dumps(r) for r in aime_records(args.train, args.seed, *ops)]
        Path(args.aime_jsonl).write_text("\n".join(lines) + "\n")
        print(f"wrote {args.train} toy_math problems in the AIME format to {args.aime_jsonl}")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(args.train, args.seed, "train", *ops)).to_parquet(out / "train.parquet")
    pd.DataFrame(rows(args.test, args.seed + 1, "test", *ops)).to_parquet(out / "test.parquet")
    print(f"wrote {args.train} train / {args.test} test toy_math rows to {out}")


if __name__ == "__main__":
    main()
