"""Write the React prompt set as verl parquet rows: ``train.parquet`` + ``test.parquet``.

    python recipes/data/react.py --out-dir ~/data/verl_bot/react
    python recipes/data/react.py --out-dir /tmp/react --categories games,charts   # a subset

Input: ``recipes/data/react_prompts.jsonl`` (``--input``), one JSON object a line: ``id`` (unique),
``category``, ``split`` ("train" | "test": the fixed held-out split, part of the file so it never
moves) and ``prompt`` (the request, one or a few sentences).

Rows (verl's layout): ``data_source`` "react", ``prompt`` (chat list: one user message asking for ONE
self-contained React component in a single ```tsx block, see INSTRUCTION), ``ability`` "react",
``reward_model`` {"style": "rule", "ground_truth": None} (the React reward server needs no reference),
``extra_info`` {split, index, id, category, request}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

DEFAULT_INPUT = Path(__file__).resolve().parent / "react_prompts.jsonl"
DATA_SOURCE = "react"
SPLITS = ("train", "test")

# Our wording (the paper does not publish its prompt). The import list is the React reward server's
# allow-list (reward_servers/react/README.md): anything else fails to compile there.
INSTRUCTION = (
    "Write a single-file React component for the request below.\n"
    "Requirements:\n"
    "- One self-contained component in TypeScript (TSX) with a default export.\n"
    "- Import only from react (lucide-react icons, clsx and tailwind-merge are also available).\n"
    "- Style it with Tailwind CSS classes or inline styles; no CSS files.\n"
    "- No network requests and no external images or data: use built-in sample data.\n"
    "Answer with the complete code in one ```tsx code block."
)


def read_prompts(path: str | Path = DEFAULT_INPUT) -> list[dict]:
    """The prompt records of a JSONL file, checked: required fields, unique ids, known splits."""
    records, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            missing = [k for k in ("id", "category", "split", "prompt") if not str(rec.get(k) or "").strip()]
            if missing:
                raise ValueError(f"{path}:{n}: missing {missing}")
            if rec["split"] not in SPLITS:
                raise ValueError(f"{path}:{n}: split must be one of {SPLITS}, got {rec['split']!r}")
            if rec["id"] in seen:
                raise ValueError(f"{path}:{n}: duplicate id {rec['id']!r}")
            seen.add(rec["id"])
            records.append(rec)
    return records


def make_prompt(request: str) -> list[dict]:
    """The chat prompt: one user message with the instruction and the request."""
    return [{"role": "user", "content": f"{INSTRUCTION}\n\nRequest: {request.strip()}"}]


def convert(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train rows, test rows) in file order."""
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for index, rec in enumerate(records):
        out[rec["split"]].append(
            {
                "data_source": DATA_SOURCE,
                "prompt": make_prompt(rec["prompt"]),
                "ability": "react",
                "reward_model": {"style": "rule", "ground_truth": None},
                "extra_info": {
                    "split": rec["split"],
                    "index": index,
                    "id": rec["id"],
                    "category": rec["category"],
                    "request": rec["prompt"].strip(),
                },
            }
        )
    return out["train"], out["test"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DEFAULT_INPUT))
    p.add_argument("--out-dir", required=True)
    p.add_argument("--categories", default="", help="comma-separated categories to keep (default: all)")
    args = p.parse_args(argv)
    records = read_prompts(args.input)
    if args.categories:
        keep = {c.strip() for c in args.categories.split(",") if c.strip()}
        unknown = keep - {r["category"] for r in records}
        if unknown:
            raise SystemExit(f"unknown categories {sorted(unknown)}")
        records = [r for r in records if r["category"] in keep]
    train, test = convert(records)
    out = Path(args.out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(train).to_parquet(out / "train.parquet", index=False)
    pd.DataFrame(test).to_parquet(out / "test.parquet", index=False)
    print(f"wrote {len(train)} train + {len(test)} test rows to {out}")


if __name__ == "__main__":
    main()
