"""Write the `toy_turns` task as verl parquet: `train.parquet` and `test.parquet`.

Chains of 1-4 operations for a model that may answer at once or call its calculator tool once or more, run
through verl's `ToolAgentLoop` and scored per turn by `verl_bot_demo.scorers.toy_turns`; the rows are
`verl_bot_demo.toy_turns.rows` (toy_calc's columns, `data_source=toy_turns`). Train and test problems come from
different seeds.

    python recipes/data/toy_turns.py --out DIR [--train 512] [--test 64] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from verl_bot_demo.toy_turns import rows  # noqa: E402


def main() -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder of train.parquet and test.parquet")
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="train problems; test problems use seed + 1")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for split, count, seed in (("train", args.train, args.seed), ("test", args.test, args.seed + 1)):
        pd.DataFrame(rows(count, seed, split)).to_parquet(args.out / f"{split}.parquet")
    print(f"wrote {args.train} train / {args.test} test toy_turns rows to {args.out}")


if __name__ == "__main__":
    main()
