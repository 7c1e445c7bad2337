"""Verl's experiment trackers read back: the token-credit panel's rollouts from its HTML (wandb) and Markdown
(TensorBoard) forms and checked against the token records, a wandb offline run's history (its transaction log,
parsed here), TensorBoard's event files, and verl's own `Tracking` writing both offline. Written against wandb and
tensorboard as pyproject.toml pins them; used by tests/component/test_tracking.py and the trainer's end-to-end runs."""

from __future__ import annotations

import contextlib
import html.parser
import json
import re
import struct
from pathlib import Path

import pytest

from verl_bot.observe import panels
from verl_bot.observe.token_view import shown_tokens


class _PanelParser(html.parser.HTMLParser):
    """The rollouts of an HTML panel: key, and per shown token (position, id, r_t, A_t, background), gaps."""

    def __init__(self):
        super().__init__()
        self.rollouts: list[dict] = []
        self.scales: dict[str, float] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if "legend" in classes:
            self.scales[a["data-quantity"]] = float(a["data-scale"])
        elif "rollout" in classes:
            self.rollouts.append({"key": a["data-key"], "tokens": [], "omitted": []})
        elif "tok" in classes:
            pos, token_id = re.match(r"#(\d+) id (\d+) ", a["title"]).groups()
            self.rollouts[-1]["tokens"].append({"pos": int(pos), "id": int(token_id)})
        elif "cell" in classes:
            token = self.rollouts[-1]["tokens"][-1]
            token[classes[1]] = float(a["data-value"])
            token[classes[1] + "_bg"] = re.match(r"background:(rgb\([^)]*\))", a["style"]).group(1)
        elif "gap" in classes:
            self.rollouts[-1]["omitted"].append(int(a["data-omitted"]))


def html_panel(page: str) -> tuple[list[dict], dict[str, float]]:
    """(rollouts, {quantity: scale}) of an HTML panel."""
    parser = _PanelParser()
    parser.feed(page)
    return parser.rollouts, parser.scales


def markdown_panel(text: str) -> list[dict]:
    """The rollouts of a Markdown panel: key, and per shown token (position, id, r_t, A_t, squares), gaps."""
    rollouts = []
    for line in text.splitlines():
        head = re.match(r"\*\*rollout \d+\*\* · `([^`]+)`", line)
        if head:
            rollouts.append({"key": head.group(1), "tokens": [], "omitted": []})
            continue
        gap = re.match(r"\| … \| \*(\d+) tokens\* \|", line)
        row = re.match(r"\| (\d+) \| (.*) \| (\d+) \| (\S+) \| (\S*) \| (\S+) \| (\S*) \|$", line)
        if gap:
            rollouts[-1]["omitted"].append(int(gap.group(1)))
        elif row:
            pos, _, token_id, reward, reward_sq, advantage, advantage_sq = row.groups()
            rollouts[-1]["tokens"].append({"pos": int(pos), "id": int(token_id), "rewards": float(reward),
                                           "advantages": float(advantage), "squares": (reward_sq, advantage_sq)})
    return rollouts


def check_panel(rollouts: list[dict], records: list[dict], limit: int) -> None:
    """Each rollout of a panel is its token record: the tokens `shown_tokens` keeps, ids and values equal, gaps
    counting the others."""
    by_key = {r["key"]: r for r in records}
    assert rollouts
    for rollout in rollouts:
        record = by_key[rollout["key"]]
        length = len(record["response_ids"])
        shown = shown_tokens(length, limit)
        assert [t["pos"] for t in rollout["tokens"]] == shown
        assert sum(rollout["omitted"]) == length - len(shown)
        for token in rollout["tokens"]:
            i = token["pos"]
            assert token["id"] == record["response_ids"][i]
            assert token["rewards"] == pytest.approx(record["rewards"][i], rel=1e-5, abs=1e-6)
            assert token["advantages"] == pytest.approx(record["advantages"][i], rel=1e-5, abs=1e-6)


WANDB_BLOCK, WANDB_HEADER = 32768, 7


def _wandb_records(path: Path):
    """The raw records of a wandb transaction log (`run-<id>.wandb`: LevelDB's log format behind a 7-byte header,
    32 KiB blocks, records split FULL/FIRST/MIDDLE/LAST)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, pending = WANDB_HEADER, b""
    while pos + WANDB_HEADER <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < WANDB_HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + WANDB_HEADER])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + WANDB_HEADER:pos + WANDB_HEADER + length]
        pos += WANDB_HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending
            pending = b""


def wandb_history(wandb_dir: Path) -> tuple[Path, dict[int, dict]]:
    """(the run's folder, {step: every item logged at it}) of the one offline wandb run under `wandb_dir`."""
    from wandb.proto import wandb_internal_pb2

    (run_file,) = Path(wandb_dir).glob("wandb/offline-run-*/run-*.wandb")
    steps: dict[int, dict] = {}
    for raw in _wandb_records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        steps.setdefault(int(items["_step"]), {}).update(items)
    return run_file.parent, steps


def wandb_panels(wandb_dir: Path) -> dict[int, dict]:
    """{step: {"html": the panel's page, "histograms": {key: (values, bins)}}} of an offline wandb run."""
    run, history = wandb_history(wandb_dir)
    out = {}
    for step, items in history.items():
        if items.get(f"{panels.PANEL_KEY}/_type") == "html-file":
            histograms = {key: (items[f"{key}/values"], items[f"{key}/bins"])
                          for key in panels.HISTOGRAM_KEYS.values() if items.get(f"{key}/_type") == "histogram"}
            page = (run / "files" / items[f"{panels.PANEL_KEY}/path"]).read_text()
            out[step] = {"html": page, "histograms": histograms}
    return out


def tensorboard_panels(logdir: Path) -> tuple[dict[int, str], dict[str, dict[int, object]], set[str]]:
    """({step: Markdown panel}, {histogram tag: {step: HistogramValue}}, scalar tags) of TensorBoard's event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "histograms": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    texts = {e.step: e.tensor_proto.string_val[0].decode() for tag in tags["tensors"]
             if tag.startswith(panels.PANEL_KEY) for e in acc.Tensors(tag)}
    histograms = {tag: {e.step: e.histogram_value for e in acc.Histograms(tag)} for tag in tags["histograms"]}
    return texts, histograms, set(tags["scalars"])


@contextlib.contextmanager
def offline_trackers(tmp_path: Path, monkeypatch, backends: list[str]):
    """verl's own `Tracking` of `backends`, wandb offline under `tmp_path`, TensorBoard in `tmp_path`/tb; on exit
    finished and wandb's service torn down (an offline run's file is complete only then; the next run in this
    process reads its own WANDB_DIR)."""
    import wandb
    from verl.utils.tracking import Tracking

    environ = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
               "TENSORBOARD_DIR": str(tmp_path / "tb"), "VERL_FILE_LOGGER_PATH": str(tmp_path / "metrics.jsonl")}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    wandb.teardown()
    trackers = Tracking("verl_bot_test", tmp_path.name, backends)
    try:
        yield trackers
    finally:
        trackers.finish()
        wandb.teardown()
