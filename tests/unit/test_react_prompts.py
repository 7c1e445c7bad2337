"""The React prompt set (recipes/data/react_prompts.jsonl) and its preprocessor (recipes/data/react.py)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("recipes_data_react", ROOT / "recipes" / "data" / "react.py")
react = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(react)

PROMPTS = ROOT / "recipes" / "data" / "react_prompts.jsonl"
REQUIRED_CATEGORIES = {
    "forms",
    "dashboards",
    "data_tables",
    "games",
    "landing_pages",
    "settings_panels",
    "charts",
}
STOP = set("a an the and with of to that for in on or by each as is its it from user where when can".split())


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - STOP


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return react.read_prompts(PROMPTS)


def test_about_200_prompts_with_unique_ids_and_texts(records):
    assert 190 <= len(records) <= 220
    assert len({r["id"] for r in records}) == len(records)
    assert len({" ".join(sorted(words(r["prompt"]))) for r in records}) == len(records)
    for r in records:
        assert 40 <= len(r["prompt"]) <= 400, r["id"]
        assert r["id"].startswith(r["category"] + "-"), r["id"]


def test_no_near_duplicates(records):
    worst = max(
        (len(words(a["prompt"]) & words(b["prompt"])) / len(words(a["prompt"]) | words(b["prompt"])), a["id"], b["id"])
        for a, b in itertools.combinations(records, 2)
    )
    assert worst[0] < 0.5, worst  # content-word Jaccard; the set's maximum is about 0.26


def test_categories_are_diverse_and_balanced(records):
    counts = Counter(r["category"] for r in records)
    assert REQUIRED_CATEGORIES <= set(counts), set(counts)
    assert len(counts) >= 12
    assert min(counts.values()) >= 10 and max(counts.values()) <= 20, counts


def test_fixed_held_out_split(records):
    test = [r for r in records if r["split"] == "test"]
    assert 0.15 <= len(test) / len(records) <= 0.25
    assert {r["category"] for r in test} == {r["category"] for r in records}  # every category held out
    # the split is part of the file: these ids are held out, whatever the order or seed
    assert {"forms-03", "games-03", "charts-08", "tools-13"} <= {r["id"] for r in test}


def test_read_prompts_rejects_bad_files(tmp_path):
    good = {"id": "x-01", "category": "x", "split": "train", "prompt": "A counter button."}
    for bad, message in (
        ([good, good], "duplicate id"),
        ([{**good, "split": "dev"}], "split must be one of"),
        ([{**good, "prompt": " "}], "missing"),
    ):
        path = tmp_path / "bad.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in bad))
        with pytest.raises(ValueError, match=message):
            react.read_prompts(path)


def test_preprocessor_writes_verl_parquet(tmp_path, records):
    res = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "data" / "react.py"), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    train = pd.read_parquet(tmp_path / "train.parquet")
    test = pd.read_parquet(tmp_path / "test.parquet")
    n_test = sum(r["split"] == "test" for r in records)
    assert (len(train), len(test)) == (len(records) - n_test, n_test)
    assert f"wrote {len(train)} train + {len(test)} test rows" in res.stdout
    by_id = {r["id"]: r for r in records}
    for split, df in (("train", train), ("test", test)):
        assert set(df.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert (df["data_source"] == "react").all()
        for row in df.itertuples():
            (message,) = row.prompt
            assert message["role"] == "user"
            assert "```tsx" in message["content"] and "default export" in message["content"]
            assert row.reward_model == {"style": "rule", "ground_truth": None}
            info = row.extra_info
            assert info["split"] == split
            rec = by_id[info["id"]]
            assert info["category"] == rec["category"] and rec["split"] == split
            assert message["content"].endswith("Request: " + rec["prompt"].strip())
    # verl reads the files with `datasets` (a null ground truth must survive that)
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "test.parquet"))["train"]
    assert ds[0]["reward_model"] == {"style": "rule", "ground_truth": None}
    assert ds[0]["extra_info"]["category"] == test.iloc[0]["extra_info"]["category"]


def test_category_subset(tmp_path):
    react.main(["--out-dir", str(tmp_path), "--categories", "games,charts"])
    df = pd.concat([pd.read_parquet(tmp_path / f"{s}.parquet") for s in ("train", "test")])
    assert {info["category"] for info in df["extra_info"]} == {"games", "charts"}
    with pytest.raises(SystemExit, match="unknown categories"):
        react.main(["--out-dir", str(tmp_path), "--categories", "nope"])
