"""recipes/data/aime.py: a dataset (hub layout) or a JSONL/CSV/parquet file in, through `datasets.load_dataset`;
verl parquet rows out, 80/20 split under a fixed seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "recipes" / "data"))

import aime  # noqa: E402

SAMPLE = ROOT / "recipes" / "data" / "aime_sample.jsonl"


def test_sample_file_converts(tmp_path):
    df = aime.load_table(SAMPLE)
    assert len(df) >= 10 and {"problem", "answer", "year"} <= set(df.columns)
    train, test, dropped = aime.convert(df, "aime", 0.2, 42)
    assert dropped == 0 and len(train) + len(test) == len(df) and len(test) == round(0.2 * len(df))
    row = train[0]
    assert row["data_source"] == "aime" and row["ability"] == "math"
    assert row["reward_model"]["style"] == "rule"
    assert row["prompt"][0]["role"] == "user"
    content = row["prompt"][0]["content"]
    assert "<step 1>" in content and "<final>" in content and "0 to 999" in content
    assert set(row["extra_info"]) >= {"split", "index", "year", "id", "answer_type"}
    gts = {r["extra_info"]["id"]: r["reward_model"]["ground_truth"] for r in train + test}
    assert gts["S-1"] == "1" and gts["S-10"] == "63"  # "001", "063" normalised


def test_split_is_deterministic_and_seeded():
    df = pd.DataFrame({"problem": [f"p{i}" for i in range(100)], "answer": list(range(100)), "year": 2000})
    a_train, a_test, _ = aime.convert(df, "aime", 0.2, 42)
    b_train, b_test, _ = aime.convert(df, "aime", 0.2, 42)
    c_train, c_test, _ = aime.convert(df, "aime", 0.2, 7)
    ids = lambda rows: [r["extra_info"]["id"] for r in rows]  # noqa: E731
    assert ids(a_test) == ids(b_test) and len(a_test) == 20 and len(a_train) == 80
    assert set(ids(a_test)) != set(ids(c_test))
    assert not set(ids(a_test)) & set(ids(a_train))


def test_bad_answers_dropped():
    df = pd.DataFrame(
        {"problem": ["a", "b", "c", "d", "", "f"], "answer": ["033", "1000", "-5", "x", "1", 7], "year": 1990}
    )
    train, test, dropped = aime.convert(df, "aime", 0.0, 1)
    assert dropped == 4 and sorted(r["reward_model"]["ground_truth"] for r in train) == ["33", "7"]


def test_csv_parquet_and_cli(tmp_path):
    df = aime.load_table(SAMPLE)
    csv = tmp_path / "in.csv"
    df.to_csv(csv, index=False)
    pq = tmp_path / "in.parquet"
    df.to_parquet(pq)
    for src in (csv, pq):
        out = tmp_path / src.suffix.strip(".")
        if src is csv:  # the script as users run it, once
            cmd = [sys.executable, str(ROOT / "recipes/data/aime.py"), "--input", str(src), "--out-dir", str(out)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
        else:
            aime.main(["--input", str(src), "--out-dir", str(out)])
        train, test = pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")
        assert len(train) + len(test) == len(df)
        assert train.iloc[0]["reward_model"]["ground_truth"].isdigit()


def test_year_filter(tmp_path):
    out = tmp_path / "o"
    aime.main(["--input", str(SAMPLE), "--out-dir", str(out), "--year-min", "2005", "--year-max", "2008"])
    rows = pd.concat([pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")])
    assert sorted(int(e["year"]) for e in rows["extra_info"]) == [2005, 2006, 2007, 2008]


def test_math_style(tmp_path):
    src = tmp_path / "math.jsonl"
    recs = [
        {"problem": "Simplify 2/4.", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1"},
        {"problem": "What is 1+1?", "answer": "2"},
        {"problem": "No answer here.", "solution": "none"},
    ]
    src.write_text("\n".join(json.dumps(r) for r in recs))
    train, test, dropped = aime.convert(aime.load_table(src), "math", 0.0, 0)
    assert dropped == 1
    assert [r["reward_model"]["ground_truth"] for r in train] == ["\\frac{1}{2}", "2"]
    assert train[0]["data_source"] == "math" and train[0]["extra_info"]["level"] == "Level 1"
    assert "0 to 999" not in train[0]["prompt"][0]["content"]


def test_unsupported_format_and_missing_file(tmp_path):
    (tmp_path / "x.txt").write_text("problem,answer\n")
    with pytest.raises(ValueError, match="unsupported input format"):
        aime.load_table(tmp_path / "x.txt")
    with pytest.raises(FileNotFoundError):
        aime.load_table(tmp_path / "missing.jsonl")


def test_json_array_file(tmp_path):
    src = tmp_path / "aime.json"
    src.write_text(json.dumps([{"problem": "What is 6*7?", "answer": "042", "year": 1999}]))
    train, _, dropped = aime.convert(aime.load_table(src), "aime", 0.0, 0)
    assert dropped == 0 and train[0]["reward_model"]["ground_truth"] == "42"


def test_default_is_the_hub_aime_set_through_datasets(tmp_path):
    """Without --input: `datasets.load_dataset(--dataset, split=--split)`, the call that fetches the hub set.
    Here --dataset is a local directory laid out like the hub repository (no network): the same code path,
    the hub's columns (ID, Year, Problem Number, Question, Answer, Part)."""
    assert aime.DEFAULT_DATASET == "di-zhang-fdu/AIME_1983_2024"
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    repo = tmp_path / "AIME_1983_2024"
    repo.mkdir()
    pd.DataFrame(
        [
            {
                "ID": f"{r['year']}-{i + 1}",
                "Year": r["year"],
                "Problem Number": i + 1,
                "Question": r["problem"],
                "Answer": int(r["answer"]),
                "Part": None if r["year"] < 2000 else "I",
            }
            for i, r in enumerate(records)
        ]
    ).to_csv(repo / "AIME_Dataset_1983_2024.csv", index=False)
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "recipes/data/aime.py"), "--dataset", str(repo), "--out-dir", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"wrote {len(records) - round(0.2 * len(records))} train + {round(0.2 * len(records))} test rows" in r.stdout
    rows = pd.concat([pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")])
    by_id = {e["id"]: (e, gt["ground_truth"]) for e, gt in zip(rows["extra_info"], rows["reward_model"], strict=True)}
    extra, ground_truth = by_id["2001-1"]
    assert ground_truth == "1" and extra["year"] == 2001 and extra["problem"] == records[0]["problem"]
    # --split reaches datasets: the directory has only a train split
    r = subprocess.run([*cmd, "--split", "test"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "test" in r.stderr
