"""Exact token records of chosen training steps: what the token-credit report draws.

The knobs (`+algorithm.token_report_steps`, `token_report_groups`, `token_report_dir`) and their start-up check
(`config_problem`), which steps and groups are recorded, and the record of each rollout (`RECORD_KEYS`: the response
token ids as generated, the token rewards `rm_scores`, the advantages the actor trains on, uid and data_source),
written as `<dir>/step_<N>.jsonl` by the iteration's advantage call (`verl_bot.training.records`). Nothing is
re-tokenized: the report (`verl_bot/eval/training_report.py`) shows each token as the raw bytes of the tokenizer's
own piece for that id. The records and the report: docs/evaluation.md, section The token-credit report; the knobs:
docs/knobs.md.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

STEPS_KEY = "token_report_steps"
GROUPS_KEY = "token_report_groups"
DIR_KEY = "token_report_dir"
DEFAULT_GROUPS = 4
RECORD_KEYS = (
    "step",
    "estimator",
    "uid",
    "key",
    "data_source",
    "prompt",
    "response_ids",
    "token_bytes",
    "special",
    "rewards",
    "advantages",
    "info",
)
TOKEN_KEYS = ("response_ids", "token_bytes", "special", "rewards", "advantages")  # one entry per response token
INFO_KEYS = ("score", "acc", "scorer_failed")
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece's byte fallback
_SPIECE_SPACE = "\u2581"


# ---------------------------------------------------------------------------------------------- knobs
def _as_list(value: Any) -> list:
    """A knob that may be one value or a list (Hydra gives a ListConfig) as a list; None -> []."""
    if value is None or value == "":
        return []
    return [value] if isinstance(value, (int, str)) else list(value)


def recorded_steps(algorithm: Mapping, total_steps: int) -> set[int]:
    """The 1-based steps to record: `token_report_steps` with negatives counted from `total_steps` (-1 = last).

    Raises ValueError for a value that is not an integer or a step outside 1..total_steps.
    """
    out = set()
    for step in _as_list(algorithm.get(STEPS_KEY)):
        try:
            value = int(step)
        except (TypeError, ValueError):
            raise ValueError(f"algorithm.{STEPS_KEY}: {step!r} is not a step number") from None
        resolved = value if value > 0 else total_steps + 1 + value
        if not 1 <= resolved <= total_steps:
            raise ValueError(f"algorithm.{STEPS_KEY}: step {value} is outside 1..{total_steps}")
        out.add(resolved)
    return out


def config_problem(algorithm: Mapping, total_steps: int | None) -> str | None:
    """One line naming what is wrong with the knobs (for the start-up checks), or None.

    `total_steps`: `trainer.total_training_steps` when set; without it only the form of the steps is checked.
    """
    try:
        values = [int(s) for s in _as_list(algorithm.get(STEPS_KEY))]
    except (TypeError, ValueError):
        return f"algorithm.{STEPS_KEY} must be a list of step numbers, got {algorithm.get(STEPS_KEY)!r}"
    if 0 in values:
        return f"algorithm.{STEPS_KEY}: steps are 1-based and negative ones count from the last (-1); 0 is neither"
    if total_steps:
        try:
            recorded_steps(algorithm, int(total_steps))
        except ValueError as exc:
            return str(exc)
    try:
        groups = int(algorithm.get(GROUPS_KEY, DEFAULT_GROUPS))
    except (TypeError, ValueError):
        return f"algorithm.{GROUPS_KEY} must be an integer, got {algorithm.get(GROUPS_KEY)!r}"
    if groups < 0:
        return f"algorithm.{GROUPS_KEY} must be >= 0 (0 = every group), got {groups}"
    return None


def record_dir(algorithm: Mapping, default_local_dir: str) -> Path:
    """Where the records go: `token_report_dir`, else `<trainer.default_local_dir>/token_records`."""
    return Path(str(algorithm.get(DIR_KEY) or "") or Path(default_local_dir) / "token_records")


def chosen_groups(uids: Sequence[str], prompts: Sequence[str], groups: int) -> list[str]:
    """The uids of the `groups` groups with the smallest prompt texts (ties: uid); `groups` 0 = every group."""
    first_prompt: dict[str, str] = {}
    for uid, prompt in zip(uids, prompts, strict=True):
        first_prompt.setdefault(uid, prompt)
    ordered = sorted(first_prompt, key=lambda u: (first_prompt[u], u))
    return ordered if groups <= 0 else ordered[:groups]


# ---------------------------------------------------------------------------------------- token bytes
@functools.lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet inverted: the printable character that stands for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    chars = {b: b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + shifted
            shifted += 1
    return {chr(c): b for b, c in chars.items()}


@functools.lru_cache(maxsize=8)  # a run's tokenizer, asked at every recorded step and panel: its JSON is megabytes
def is_byte_level(tokenizer: Any) -> bool:
    """True when the tokenizer's decoder is byte-level BPE (GPT-2, Qwen, SmolLM, Llama 3, Phi-4 style)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    return '"ByteLevel"' in json.dumps(decoder)


def piece_bytes(piece: str, byte_level: bool) -> bytes:
    """The raw bytes a tokenizer piece stands for.

    Byte-level BPE: each character of the piece stands for one byte (GPT-2's alphabet). SentencePiece:
    `<0xE2>` is one byte, U+2581 is a space, the rest is UTF-8 text. Anything else: the piece's UTF-8.
    """
    if byte_level:
        alphabet = _byte_level_alphabet()
        if all(ch in alphabet for ch in piece):
            return bytes(alphabet[ch] for ch in piece)
    match = _BYTE_PIECE.match(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace(_SPIECE_SPACE, " ").encode("utf-8")


def token_bytes(tokenizer: Any, ids: Sequence[int]) -> tuple[list[bytes], list[bool]]:
    """Each token's raw bytes and whether it is a special token (shown by its name, e.g. `<|im_end|>`)."""
    byte_level = is_byte_level(tokenizer)
    special_ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    pieces = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    raw, special = [], []
    for token_id, piece in zip(ids, pieces, strict=True):
        is_special = int(token_id) in special_ids
        raw.append(str(piece).encode("utf-8") if is_special else piece_bytes(str(piece), byte_level))
        special.append(is_special)
    return raw, special


# -------------------------------------------------------------------------------------------- records
def build_records(
    step: int,
    estimator: str,
    rows: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    groups: int,
) -> list[dict]:
    """The records of one step: the rows of the chosen groups, each with its token bytes.

    Args:
        step: the training step. estimator: `algorithm.adv_estimator`.
        rows: per rollout `uid`, `key`, `data_source`, `prompt_ids` (list), `response_ids` (L,),
            `rewards` (L,), `advantages` (L,), `info` (the manager's reward_extra_info or {}).
        tokenizer: the run's tokenizer. groups: how many groups (0 = all).
    """
    rows = list(rows)
    prompts = [tokenizer.decode(list(r["prompt_ids"]), skip_special_tokens=True) for r in rows]
    keep = set(chosen_groups([str(r["uid"]) for r in rows], prompts, groups))
    records = []
    for row, prompt in zip(rows, prompts, strict=True):
        if str(row["uid"]) not in keep:
            continue
        ids = [int(i) for i in row["response_ids"]]
        raw, special = token_bytes(tokenizer, ids)
        info = row.get("info") or {}
        records.append(
            {
                "step": int(step),
                "estimator": str(estimator),
                "uid": str(row["uid"]),
                "key": str(row["key"]),
                "data_source": str(row["data_source"]),
                "prompt": prompt,
                "response_ids": ids,
                "token_bytes": [b.hex() for b in raw],
                "special": special,
                "rewards": [float(x) for x in row["rewards"]],
                "advantages": [float(x) for x in row["advantages"]],
                "info": {k: float(info[k]) for k in INFO_KEYS if isinstance(info.get(k), (int, float))},
            }
        )
    records.sort(key=lambda r: (r["prompt"], r["uid"], r["key"]))
    return records


def write_records(folder: Path, step: int, records: list[dict], append: bool = False) -> Path:
    """Write the records of `step` to `<folder>/step_<step>.jsonl`; `append`: add to it (several advantage calls
    of one step)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step}.jsonl"
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_records(path: Path) -> list[dict]:
    """The records of one file, checked (ValueError naming the file and line when a key or a length is wrong)."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        missing = [k for k in RECORD_KEYS if k not in record]
        lengths = {len(record.get(k) or []) for k in TOKEN_KEYS}
        if missing or len(lengths) != 1:
            raise ValueError(f"{path}:{n}: not a token record (missing {missing}, lengths {sorted(lengths)})")
        out.append(record)
    return out


def recorded_files(folder: Path) -> dict[int, Path]:
    """step -> record file of a run's record folder."""
    found = {}
    for path in Path(folder).glob("step_*.jsonl"):
        try:
            found[int(path.stem.split("_", 1)[1])] = path
        except ValueError:
            continue
    return dict(sorted(found.items()))
