"""Files of the evaluation CLI: generation JSONL rows, JSON reports, and the one error type the CLI reports.

A generation row (one line of the JSONL that ``python -m verl_bot.eval generate`` writes, and that every
scoring subcommand reads):

    {"prompt_index": 0, "sample_index": 1, "data_source": "react", "prompt": "<the user text>",
     "response": "<the model's text>", "ground_truth": null}

``(prompt_index, sample_index)`` is unique within a file; rows of one prompt share ``prompt`` and
``ground_truth``. Hand-written files are fine as long as they follow this shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

SCORE_METRIC = "reward/score/mean"  # the mean global score G of a training step (verl's file logger)
ROW_KEYS = ("prompt_index", "sample_index", "data_source", "prompt", "response", "ground_truth")


class EvalError(Exception):
    """Bad input or an unreachable service: the CLI prints ``error: <message>`` and exits with code 2."""


def read_generations(path: str | Path) -> list[dict]:
    """The rows of a generation JSONL, checked: each has every key of ``ROW_KEYS``, keys are unique, not empty.

    Raises EvalError naming the file (and line) for a missing file, bad JSON, a missing key or no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise EvalError(f"{path}: no such file")
    rows, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise EvalError(f"{path}:{n}: not JSON ({e})") from None
        missing = [k for k in ROW_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise EvalError(f"{path}:{n}: missing {', '.join(missing)} (see `python -m verl_bot.eval generate`)")
        try:
            key = (int(row["prompt_index"]), int(row["sample_index"]))
        except (TypeError, ValueError):
            raise EvalError(f"{path}:{n}: prompt_index and sample_index must be integers") from None
        if key in seen:
            raise EvalError(f"{path}:{n}: duplicate (prompt_index, sample_index) {key}")
        seen.add(key)
        rows.append(row)
    if not rows:
        raise EvalError(f"{path}: no generation rows")
    return rows


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    """Write rows one JSON object a line (UTF-8, parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_json(path: str | Path, obj: dict) -> Path:
    """Write one indented JSON document (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_json(path: str | Path) -> dict:
    """A JSON report written by one of the subcommands; EvalError when missing or not a JSON object."""
    path = Path(path)
    if not path.is_file():
        raise EvalError(f"{path}: no such file")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise EvalError(f"{path}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise EvalError(f"{path}: expected a JSON object")
    return obj


def group_by_prompt(rows: Iterable[dict]) -> dict[int, list[dict]]:
    """prompt_index -> its rows sorted by sample_index (prompts in ascending index order)."""
    groups: dict[int, list[dict]] = {}
    for row in rows:
        groups.setdefault(int(row["prompt_index"]), []).append(row)
    return {k: sorted(groups[k], key=lambda r: int(r["sample_index"])) for k in sorted(groups)}


def read_metric(metrics_file: Path, key: str = SCORE_METRIC) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric from a verl file-logger JSONL."""
    steps, values = [], []
    for line in metrics_file.read_text().splitlines():
        record = json.loads(line)
        if key in record.get("data", {}):
            steps.append(int(record["step"]))
            values.append(float(record["data"][key]))
    return steps, values
