"""Write the `toy_calc` task as verl parquet: `train.parquet` and `test.parquet`.

toy_math's problems ("Compute 3+4-2.", `verl_bot_demo.toy_math`) for a model that has a calculator tool
(`verl_bot_demo.toy_calc`, `verl_bot_demo/calc_tool.py`) and answers in two turns, run through verl's `ToolAgentLoop`
(`actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent`, `multi_turn.enable=true`) and scored per turn by
`verl_bot_demo.scorers.toy_calc`. Rows follow verl's preprocessors: `data_source`, `prompt` (chat list), `ability`,
`reward_model` {style, ground_truth (the answer as a string)}, `extra_info` (`expression`: the chain the tool
should be called with). Train and test problems come from different seeds.

    python recipes/data/toy_calc.py --out DIR [--train 512] [--test 64] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from verl_bot_demo.toy_math import problems  # noqa: E402


def rows(count: int, seed: int, split: str) -> list[dict]:
    """`count` verl rows of the toy_calc task (deterministic for `seed`)."""
    return [
        {
            "data_source": "toy_calc",
            "prompt": [{"role": "user", "content": p.prompt}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(p.answer)},
            "extra_info": {"index": i, "split": split, "expression": p.expression},
        }
        for i, p in enumerate(problems(count, seed))
    ]


def main() -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder of train.parquet and test.parquet")
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="train problems; test problems use seed + 1")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(args.train, args.seed, "train")).to_parquet(out / "train.parquet")
    pd.DataFrame(rows(args.test, args.seed + 1, "test")).to_parquet(out / "test.parquet")
    print(f"wrote {args.train} train / {args.test} test toy_calc rows to {out}")


if __name__ == "__main__":
    main()
