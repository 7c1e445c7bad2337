"""verl setups people already run, through verl's trainer on the CPU: DAPO's dynamic sampling with the `bot` manager
and PPO with a critic (`gae`) on the manager's returns layout.

- DAPO (`algorithm.filter_groups`, verl's default metric `reward`): a scorer whose G is the same for every rollout of
  two thirds of the prompts, half of those with a local signal that separates their rollouts: every group the actor
  trained on (token records of every group of both steps) has a bag of token rewards with a spread, groups with a
  local signal only are among them, and the metrics count the groups dropped where verl's metric (the summed token
  rewards, L * G for a flat group) would have kept them.
- `gae` with a critic on the same tiny model: the manager lays G on the last token and S_t on the tokens it covers;
  the token records show rewards before the last token, the critic trains (`critic/*` metrics), the run's INFO line
  names the layout.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from tests.harness.trainer import Run
from verl_bot.observe.token_records import read_records, recorded_files

pytestmark = pytest.mark.timeout(900)

SCORER = '''
"""A scorer whose signal depends on the prompt's number i: i % 3 == 0 -> G varies with the response; 1 -> G = 0.5
and nothing else (no signal); 2 -> G = 0.5 and a local span of -1 on the first character of half the responses
(a signal in S only)."""
import re
import zlib


def signal_by_prompt(prompt, response, ground_truth=None, extra_info=None):
    i = int(re.search(r"number (\\d+)", str(prompt)).group(1))
    kind = i % 3
    if kind == 0:
        return {"global": {"score": float(zlib.crc32(response.encode()) % 2)}, "info": {"kind": 0.0}}
    spans = []
    if kind == 2 and response and zlib.crc32(response.encode()) % 2:
        spans = [{"start": 0, "end": 1, "value": -1.0}]
    return {"global": {"score": 0.5}, "local": spans, "info": {"kind": float(kind)}}
'''


@pytest.fixture(scope="module")
def scorer(workdir):
    (workdir / "probe" / "vb_setups.py").write_text(SCORER)
    return "python:vb_setups:signal_by_prompt"


def groups_of(folder) -> dict[tuple[int, str], list[dict]]:
    """{(step, uid): the group's token records} of every recorded step."""
    groups = defaultdict(list)
    for step, path in recorded_files(folder).items():
        for record in read_records(path):
            groups[(step, record["uid"])].append(record)
    return groups


def logged_metrics(run: Run) -> list[dict]:
    return [json.loads(line)["data"] for line in run.metrics.read_text().splitlines() if line.strip()]


def test_dapo_filter_drops_groups_without_signal(workdir, scorer):
    run = Run(workdir, "dapo_bot", [
        "algorithm.adv_estimator=bot", "reward.reward_manager.name=bot",
        f"+reward.reward_kwargs.bot.scorers.toy_lint={scorer}",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward",
        "+algorithm.token_report_steps=[1,2]", "+algorithm.token_report_groups=0",
    ]).finish(timeout=600)
    groups = groups_of(run.dir / "ckpt" / "token_records")
    assert len(groups) == 8  # 4 prompts a step, both steps
    kinds = set()
    for key, records in groups.items():
        bag = np.concatenate([np.asarray(r["rewards"]) for r in records])
        assert bag.max() > bag.min(), (key, [r["rewards"] for r in records])  # a group with nothing: dropped
        assert any(np.abs(r["advantages"]).max() > 0 for r in records), key
        prompt = records[0]["prompt"]
        kinds.add(int(prompt.split("number ")[1].split()[0]) % 3)
    assert 1 not in kinds  # G = 0.5 and no span: never trained
    assert 2 in kinds  # G = 0.5 with a span on some rollouts: trained on S alone
    steps = logged_metrics(run)
    assert sum(m.get("verl_bot/dapo_dropped", 0) for m in steps) >= 1
    # a flat group's summed rewards are L * 0.5: verl's `reward` metric would have kept those of unequal lengths
    assert all("verl_bot/dapo_dropped_where_metric_differs" in m for m in steps)


def test_return_estimators_see_local_signal(workdir):
    """PPO with a critic (verl's default estimator) and the `bot` manager with toy_lint's spans: the returns layout
    (G once on the last token, S_t where it lies) reaches verl's `gae`, and the critic trains."""
    model = workdir / "model"
    run = Run(workdir, "gae_bot", [
        "algorithm.adv_estimator=gae", "reward.reward_manager.name=bot",
        "critic.enable=true", f"critic.model.path={model}", "critic.ppo_mini_batch_size=4",
        "critic.ppo_micro_batch_size_per_gpu=16", "+critic.model.override_config.attn_implementation=sdpa",
        "+algorithm.token_report_steps=[1,2]", "+algorithm.token_report_groups=0",
    ]).finish(timeout=600)
    log = run.output()
    assert "bot manager: returns token rewards, w_g * G on the last token" in log, log[-3000:]
    records = [r for group in groups_of(run.dir / "ckpt" / "token_records").values() for r in group]
    assert len(records) == 2 * 4 * 4
    for record in records:  # G on the last token only; toy_lint's penalties (S in {-1, 0}) before it
        rewards, score = np.asarray(record["rewards"]), record["info"]["score"]
        assert -1.0 - 1e-6 <= rewards[-1] - score <= 1e-6  # G + S_last, S_last in [-1, 0]
        assert rewards[:-1].max() <= 0
    assert any(np.asarray(r["rewards"])[:-1].min() < 0 for r in records)  # the local signal reached gae
    steps = logged_metrics(run)
    assert all("critic/loss" in m and "critic/grad_norm" in m and "critic/values/mean" in m for m in steps)
    assert all(m["reward/local_signal/mean"] > 0 for m in steps)
