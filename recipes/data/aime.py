"""AIME 1983-2024 (or a MATH-style file) into verl parquet rows: ``train.parquet`` + ``test.parquet``.

    python recipes/data/aime.py --out-dir ~/data/verl_bot/aime      # AIME 1983-2024 from the Hugging Face hub
    python recipes/data/aime.py --input aime_1983_2024.jsonl --out-dir ~/data/aime   # your own file
    python recipes/data/aime.py --input recipes/data/aime_sample.jsonl --out-dir /tmp/aime_demo   # CPU demo
    python recipes/data/aime.py --input math_train.parquet --kind math --out-dir ~/data/math

Loading goes through ``datasets.load_dataset``, as verl's own preprocessing scripts load theirs: without
``--input``, the hub dataset ``--dataset`` (default ``di-zhang-fdu/AIME_1983_2024``: AIME 1983-2023 and 2024
part II, columns ID, Year, Problem Number, Question, Answer, Part; its card calls it a benchmark, the paper
trains on its 80% split) at ``--split`` (default ``train``; ``--dataset`` may also be a local copy of a hub
dataset's directory); with ``--input FILE``, the file through the ``json`` / ``csv`` / ``parquet`` builder (by
extension).

Columns: AIME ``problem``, ``answer``, ``year`` (aliases: question/Problem/Question, Answer, Year; optional
``id``/``ID``/``problem_number``). MATH-style: ``problem`` and either ``answer`` or ``solution`` (its last
``\\boxed{}`` is the answer), optional ``level``/``type``.

Rows (verl's layout): ``data_source`` ("aime" | "math"), ``prompt`` (chat list: one user message asking for
``<step i>`` tags and a ``<final>`` answer), ``ability`` "math", ``reward_model`` {"style": "rule",
"ground_truth": str}, ``extra_info`` {split, index, year, id, answer_type, problem}. AIME answers are normalised
to integers 0-999 (``"033"`` -> ``"33"``); rows whose answer cannot be normalised are dropped and counted.
Split: the paper's 80/20 (``--test-frac 0.2``), a shuffle under a fixed ``--seed`` (42), stable for a given input.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from reward_servers.math.parsing import aime_ground_truth, boxed_contents, in_aime_range  # noqa: E402

INSTRUCTION = (
    "Solve the following problem step by step. Write each step inside numbered tags: <step 1> ... </step 1>, "
    "<step 2> ... </step 2>, and so on. After the last step, write only the final answer inside "
    "<final> ... </final>."
)
AIME_HINT = " The answer is an integer from 0 to 999."

ALIASES = {
    "problem": ("problem", "question", "Problem", "Question", "prompt"),
    "answer": ("answer", "Answer", "final_answer", "ground_truth"),
    "year": ("year", "Year"),
    "id": ("id", "ID", "problem_id", "problem_number", "Problem Number"),
    "solution": ("solution", "Solution"),
}


DEFAULT_DATASET = "di-zhang-fdu/AIME_1983_2024"
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def load_table(source: str | Path, split: str = "train") -> pd.DataFrame:
    """A DataFrame from a local .jsonl/.json/.csv/.parquet file, else from the dataset ``source`` (a hub name or
    a local dataset directory) at ``split``; both through ``datasets.load_dataset``."""
    import datasets

    path = Path(source).expanduser()
    if path.suffix.lower() in FILE_BUILDERS:
        if not path.is_file():
            raise FileNotFoundError(f"no such input file: {path}")
        table = datasets.load_dataset(FILE_BUILDERS[path.suffix.lower()], data_files=str(path), split="train")
    elif path.is_file():
        raise ValueError(f"unsupported input format {path.suffix!r} (jsonl, json, csv, parquet)")
    else:
        table = datasets.load_dataset(str(source), split=split)
    return table.to_pandas()


def pick(record: dict, field: str):
    """The first present, non-empty alias of ``field`` in ``record`` (None if none)."""
    for name in ALIASES[field]:
        v = record.get(name)
        if v is not None and not (isinstance(v, float) and v != v) and str(v).strip() != "":
            return v
    return None


def make_prompt(problem: str, kind: str) -> list[dict]:
    """The chat prompt: one user message with the format instruction and the problem."""
    hint = AIME_HINT if kind == "aime" else ""
    return [{"role": "user", "content": f"{INSTRUCTION}{hint}\n\nProblem: {problem.strip()}"}]


def normalise_answer(record: dict, kind: str) -> str | None:
    """Ground truth as a string: AIME integer 0-999, or the MATH answer (``answer`` or the solution's last box)."""
    ans = pick(record, "answer")
    if hasattr(ans, "item"):  # numpy scalar from parquet
        ans = ans.item()
    if kind == "aime":
        v = aime_ground_truth(ans) if ans is not None else None
        return str(v) if v is not None and in_aime_range(v) else None
    if ans is None:
        sol = pick(record, "solution")
        if sol is None:
            return None
        boxes = boxed_contents(str(sol))
        if not boxes:
            return None
        s, e = boxes[-1]
        ans = str(sol)[s:e]
    ans = str(ans).strip()
    return ans or None


def convert(df: pd.DataFrame, kind: str = "aime", test_frac: float = 0.2, seed: int = 42) -> tuple[list, list, int]:
    """(train rows, test rows, number of dropped input rows). Deterministic for a given input and seed."""
    rows, dropped = [], 0
    for i, rec in enumerate(df.to_dict(orient="records")):
        problem = pick(rec, "problem")
        gt = normalise_answer(rec, kind)
        if problem is None or gt is None:
            dropped += 1
            continue
        year = pick(rec, "year")
        rid = pick(rec, "id")
        extra = {
            "index": i,
            "id": str(rid) if rid is not None else str(i),
            "year": int(year) if year is not None and str(year).strip().isdigit() else None,
            "answer_type": "aime" if kind == "aime" else "math",
            "problem": str(problem),
        }
        for key in ("level", "type"):
            if rec.get(key) is not None:
                extra[key] = str(rec[key])
        rows.append(
            {
                "data_source": kind,
                "prompt": make_prompt(str(problem), kind),
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": gt},
                "extra_info": extra,
            }
        )
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_test = round(len(rows) * test_frac)
    test_idx = set(order[:n_test])
    train, test = [], []
    for j, row in enumerate(rows):
        split = "test" if j in test_idx else "train"
        row["extra_info"]["split"] = split
        (test if split == "test" else train).append(row)
    return train, test, dropped


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", help="a local .jsonl/.json/.csv/.parquet file (instead of --dataset)")
    p.add_argument("--dataset", default=DEFAULT_DATASET, help=f"hub dataset (default {DEFAULT_DATASET})")
    p.add_argument("--split", default="train", help="split of --dataset (default train)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--kind", choices=("aime", "math"), default="aime")
    p.add_argument("--test-frac", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--year-min", type=int, default=None)
    p.add_argument("--year-max", type=int, default=None)
    args = p.parse_args(argv)
    df = load_table(args.input) if args.input else load_table(args.dataset, args.split)
    if args.year_min is not None or args.year_max is not None:
        years = pd.to_numeric(df[next(c for c in ALIASES["year"] if c in df.columns)], errors="coerce")
        keep = years.between(args.year_min or -(10**9), args.year_max or 10**9)
        df = df[keep]
    train, test, dropped = convert(df, args.kind, args.test_frac, args.seed)
    out = Path(args.out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(train).to_parquet(out / "train.parquet", index=False)
    pd.DataFrame(test).to_parquet(out / "test.parquet", index=False)
    print(f"wrote {len(train)} train + {len(test)} test rows to {out} ({dropped} input rows dropped)")


if __name__ == "__main__":
    main()
