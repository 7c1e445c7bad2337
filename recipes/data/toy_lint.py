"""Write the `toy_lint` task as verl parquet: `train.parquet` and `test.parquet`.

The task has the shape of the React reward's ESLint part (a global score plus
penalties on spans of the response), small enough for a tiny model on a CPU:
write text without the forbidden characters (scored by
`verl_bot_demo.scorers.toy_lint`). Rows follow verl's preprocessors:
`data_source`, `prompt` (chat list), `ability`, `reward_model` {style,
ground_truth}, `extra_info`.

    python recipes/data/toy_lint.py --out DIR [--train 256] [--test 32] [--forbidden aeiou]
"""

from __future__ import annotations

import argparse
from pathlib import Path

TOPICS = ["the sky", "a cat", "my day", "the sea", "a song", "your plan", "the city", "a game", "the rain", "lunch"]


def rows(count: int, forbidden: str, split: str) -> list[dict]:
    """`count` verl rows of the toy_lint task."""
    letters = ", ".join(forbidden)
    return [
        {
            "data_source": "toy_lint",
            "prompt": [{"role": "user", "content": f"Write about {TOPICS[i % len(TOPICS)]} without {letters}."}],
            "ability": "lint",
            "reward_model": {"style": "rule", "ground_truth": {"forbidden": forbidden}},
            "extra_info": {"index": i, "split": split},
        }
        for i in range(count)
    ]


def main() -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--test", type=int, default=32)
    parser.add_argument("--forbidden", default="aeiou")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(args.train, args.forbidden, "train")).to_parquet(out / "train.parquet")
    pd.DataFrame(rows(args.test, args.forbidden, "test")).to_parquet(out / "test.parquet")
    print(f"wrote {args.train} train / {args.test} test toy_lint rows to {out}")


if __name__ == "__main__":
    main()
