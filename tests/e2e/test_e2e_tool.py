"""End-to-end: per-turn credit through verl's `ToolAgentLoop` on the CPU (two trainer starts: `bot` on `toy_calc`
with the v1 trainer, `turn_bot` on `toy_turns` with the legacy trainer, whose checks are its test's docstring).

verl 0.9.1's real trainer (hf rollout, 2 steps) with `multi_turn.enable=true`, the `calc` function tool
(`verl_bot_demo/calc_tool.py`), a tiny model warm-started to call it (`--warm-start toy_calc`) and the built-in
per-turn scorer `builtin:toy_calc`. A probe loaded through verl's `VERL_USE_EXTERNAL_MODULES` records, at verl's
advantage step, every row's response ids, response mask, token rewards and advantages (and what `turn_bot` gets
and returns). The `bot` test then checks:

- some rollout called the tool and answered after its reply: its mask runs 1 -> 0 -> 1;
- each turn's mask-1 tokens (its EOS included) carry w_g * G + w_s * clip(v_turn), where G and v_turn are what the
  scorer gives the rollout recomputed offline from its ids (`token_char_spans`, `turn_layout`, `toy_calc`);
- the advantage is 0 on every mask-0 token, and equals BoT's slow reference (tests/harness/references.py) of the
  step's rewards, mask and uids everywhere;
- two turns of one rollout with differing values get differing advantages.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.harness.references import reference_bot, reference_turn_bot
from tests.harness.trainer import Run

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[2]
W_LOCAL = 0.7  # w_s != 1, so that a value that skipped the weight shows

PROBE = '''
"""Test probe: what the bot manager scored (ids, mask, token rewards) and verl's advantage step's rows."""
import json, os
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo.v1 import trainer_base
from verl_bot.rewards import manager
from verl_bot.credit.turns import MASK_KEY


def _write(record):
    with open(os.environ["VB_PROBE_FILE"], "a") as f:
        f.write(json.dumps(record) + "\\n")


_run_single = manager.BoTRewardManager.run_single


async def run_single_probe(self, data):
    out = await _run_single(self, data)
    item = data[-1]
    fields = item.non_tensor_batch.get("tool_extra_fields") or {}
    _write({"scored": True, "prompt": item.batch["prompts"].tolist(), "responses": item.batch["responses"].tolist(),
            "mask": fields.get(MASK_KEY), "rewards": out["reward_score"]})
    return out


manager.BoTRewardManager.run_single = run_single_probe
_advantage_step = trainer_base.compute_advantage_for_multi_trajectories


def advantage_step_probe(data, *args, **kwargs):
    out = _advantage_step(data, *args, **kwargs)
    _write({"uid": [str(u) for u in out.non_tensor_batch["uid"]], "mask": out.batch["response_mask"].tolist(),
            "rewards": out.batch["token_level_rewards"].tolist(), "advantages": out.batch["advantages"].tolist()})
    return out


trainer_base.compute_advantage_for_multi_trajectories = advantage_step_probe
from verl.trainer.ppo import core_algos

_turn_bot = core_algos.ADV_ESTIMATOR_REGISTRY["turn_bot"]


def turn_bot_probe(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """What verl hands `turn_bot` (its rewards, mask, uids, the active turn_reward stream) and what it returns."""
    from verl_bot.credit.streams import active_streams

    (stream,) = active_streams("turn_bot", ("turn_reward",), response_mask).values()
    advantages, returns = _turn_bot(token_level_rewards, response_mask, index, config, **kwargs)
    _write({"estimator": "turn_bot", "uid": [str(u) for u in index], "mask": response_mask.tolist(),
            "rewards": token_level_rewards.tolist(), "turn_reward": stream.tolist(),
            "advantages": advantages.tolist()})
    return advantages, returns


core_algos.ADV_ESTIMATOR_REGISTRY["turn_bot"] = turn_bot_probe
'''


TOOL_LOOP = [
    "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    "actor_rollout_ref.rollout.multi_turn.enable=true",
    "actor_rollout_ref.rollout.multi_turn.format=hermes",
    f"actor_rollout_ref.rollout.multi_turn.function_tool_path={ROOT / 'verl_bot_demo' / 'calc_tool.py'}",
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A toy_calc warm-started tiny model, toy_calc parquet files and the probe module."""
    import pandas as pd

    from recipes.data.toy_calc import rows
    from verl_bot_demo.tiny_model import build_model

    root = tmp_path_factory.mktemp("e2e_tool")
    build_model(root / "model", warm_start="toy_calc", warm_start_kwargs={"steps": 300})
    pd.DataFrame(rows(32, 0, "train")).to_parquet(root / "train.parquet")
    pd.DataFrame(rows(8, 1, "test")).to_parquet(root / "val.parquet")
    (root / "probe").mkdir()
    (root / "probe" / "vb_probe.py").write_text(PROBE)
    return root


def offline_token_rewards(tokenizer, prompt_ids: list[int], ids: list[int], mask: list[int]) -> np.ndarray:
    """What the rollout's tokens should carry, recomputed here from its ids: w_g * G on every token plus
    w_s * clip(v_turn) on the generated tokens of each turn, G and v_turn toy_calc's."""
    from verl_bot.credit.spans import token_char_spans
    from verl_bot.credit.turns import turn_ids, turn_layout
    from verl_bot_demo.calc import evaluate
    from verl_bot_demo.scorers import PROBLEM, toy_calc

    prompt = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    truth = evaluate(PROBLEM.search(prompt).group(1))
    text, spans = token_char_spans(tokenizer, ids)
    verdict = toy_calc(prompt, text, truth, None, turns=turn_layout(mask, spans) if 0 in mask else None)
    value = dict.fromkeys(range(int(turn_ids(mask).max()) + 1), 0.0)
    for entry in verdict["turns"]:
        value[entry["turn"]] += entry["value"]
    g = verdict["global"]["score"]
    return np.array([(g + W_LOCAL * np.clip(value[t], -1, 1)) if m else g
                     for t, m in zip(turn_ids(mask), mask, strict=True)])


def test_tool_agent_loop_gets_per_turn_rewards_and_bot_advantages(workdir):
    from transformers import AutoTokenizer

    from verl_bot.credit.turns import turn_count, turn_ids

    run = Run(workdir, "tool", [
        "algorithm.adv_estimator=bot",
        "reward.reward_manager.name=bot",
        f"+reward.reward_kwargs.bot.w_local={W_LOCAL}",
        "data.max_response_length=96",
        *TOOL_LOOP,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
    ]).finish(timeout=600)
    records = [json.loads(line) for line in run.probe.read_text().splitlines() if line.strip()]
    scored = [r for r in records if r.get("scored")]
    steps = [r for r in records if "advantages" in r]
    assert scored and len(steps) == 2, run.output(4000)
    tokenizer = AutoTokenizer.from_pretrained(workdir / "model")

    # the manager: each turn's generated tokens carry w_g * G + w_s * clip(v_turn), recomputed offline from the ids
    two_turn = 0
    for row in scored:
        assert row["mask"] is not None and len(row["mask"]) == len(row["responses"]) == len(row["rewards"])
        expected = offline_token_rewards(tokenizer, row["prompt"], row["responses"], row["mask"])
        np.testing.assert_allclose(row["rewards"], expected, atol=1e-6)
        two_turn += turn_count(row["mask"]) >= 2 and row["mask"][0] == 1 and 0 in row["mask"]
    assert two_turn > 0, "no rollout called the tool and answered after its reply (a 1 -> 0 -> 1 mask)"

    # verl's advantage step: those rows, 0 on tool context, BoT's advantages; differing turn values differ in A
    differing = 0
    for step in steps:
        rewards, mask = torch.tensor(step["rewards"]), torch.tensor(step["mask"])
        advantages = torch.tensor(step["advantages"])
        expected = reference_bot(rewards, mask, step["uid"])
        torch.testing.assert_close(advantages.double(), expected, atol=1e-4, rtol=1e-4)
        assert (advantages[mask == 0] == 0).all(), "a tool-context token got an advantage"
        for r, m, a in zip(rewards.numpy(), mask.numpy(), advantages.numpy(), strict=True):
            length = int(np.flatnonzero(m).max()) + 1 if m.any() else 0
            m, r, a = m[:length].astype(int), r[:length], a[:length]
            assert any(np.allclose(r, s["rewards"], atol=1e-6) for s in scored if len(s["rewards"]) == length)
            if turn_count(m) < 2:
                continue
            turns, gen = turn_ids(m), m == 1
            per_turn = sorted({t: (round(float(r[gen & (turns == t)][0]), 6), float(a[gen & (turns == t)][0]))
                               for t in set(turns[gen].tolist())}.values())
            if len({v for v, _ in per_turn}) > 1:
                assert len({adv for _, adv in per_turn}) > 1, "differing turn values, equal advantages"
                differing += 1
    assert differing > 0, "no rollout whose turns got differing values"


# ------------------------------------------------------------------- turn_bot on toy_turns, verl's legacy trainer
@pytest.fixture(scope="module")
def turns_workdir(workdir) -> Path:
    """A toy_turns warm-started tiny model and toy_turns parquet files beside the module's probe."""
    import pandas as pd

    from verl_bot_demo.tiny_model import build_model
    from verl_bot_demo.toy_turns import rows

    root = workdir / "turns"
    build_model(root / "model", warm_start="toy_turns", warm_start_kwargs={"steps": 300})
    pd.DataFrame(rows(32, 0, "train")).to_parquet(root / "train.parquet")
    pd.DataFrame(rows(8, 1, "test")).to_parquet(root / "val.parquet")
    (root / "probe").symlink_to(workdir / "probe")
    return root


def offline_turn_reward(tokenizer, prompt_ids: list[int], ids: list[int], mask: list[int]) -> np.ndarray:
    """w_s times toy_turns' value of each generated token's turn (no spans: its mean S), 0 on tool tokens,
    recomputed here from the rollout's ids."""
    from verl_bot.credit.spans import token_char_spans
    from verl_bot.credit.turns import turn_ids, turn_layout
    from verl_bot_demo.calc import evaluate
    from verl_bot_demo.scorers import PROBLEM, toy_turns

    prompt = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    text, spans = token_char_spans(tokenizer, ids)
    verdict = toy_turns(prompt, text, evaluate(PROBLEM.search(prompt).group(1)), None,
                        turns=turn_layout(mask, spans) if 0 in mask else None)
    value = {entry["turn"]: np.clip(entry["value"], -1, 1) for entry in verdict["turns"]}
    return np.array([W_LOCAL * value[t] if m else 0.0 for t, m in zip(turn_ids(mask), mask, strict=True)])


def test_turn_bot_chooses_its_turns_through_verls_legacy_trainer(turns_workdir):
    """`turn_bot` on toy_turns through verl's legacy trainer and its ToolAgentLoop (2 steps, discount 0.5): the
    manager's `turn_reward` stream is w_s times toy_turns' turn values recomputed from the ids; the estimator gets
    it in verl's batch and returns the slow reference of what it got (tests/harness/references.py); the policy took
    1 and >= 2 turns; an earlier turn's return carries a later turn's reward; tool tokens get 0."""
    from transformers import AutoTokenizer

    from verl_bot.credit.turns import turn_count, turn_ids

    run = Run(turns_workdir, "turn_bot_legacy", [
        "trainer.use_v1=false",
        "algorithm.adv_estimator=turn_bot",
        "+algorithm.turn_bot_discount=0.5",
        "reward.reward_manager.name=bot",
        f"+reward.reward_kwargs.bot.w_local={W_LOCAL}",
        "data.max_response_length=128",
        *TOOL_LOOP,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
    ]).finish(timeout=600)
    log = run.output()
    assert "Legacy trainer `main_ppo_v0.py` is deprecated" in log, log[-3000:]
    assert "verl-bot 0.1.0 is in use in this run (algorithm.adv_estimator=turn_bot)" in log, log[-3000:]
    records = [json.loads(line) for line in run.probe.read_text().splitlines() if line.strip()]
    scored = [r for r in records if r.get("scored")]
    calls = [r for r in records if r.get("estimator") == "turn_bot"]
    assert scored and len(calls) == 2, run.output(4000)
    tokenizer = AutoTokenizer.from_pretrained(turns_workdir / "model")

    # the manager: the stream is w_s times each turn's value, on the turn's generated tokens, 0 on tool tokens
    counts = set()
    for row in scored:
        stream = row["rewards"]["streams"]["turn_reward"]
        np.testing.assert_allclose(stream, offline_turn_reward(tokenizer, row["prompt"], row["responses"],
                                                                row["mask"]), atol=1e-6)
        counts.add(min(turn_count(row["mask"]), 2))
    assert counts == {1, 2}, "the policy did not choose between one turn and more"

    # the estimator: verl's batch carries the stream; the advantages are the slow reference's, 0 on tool tokens
    later = 0
    for call in calls:
        rewards, mask, stream = (np.array(call[k]) for k in ("rewards", "mask", "turn_reward"))
        expected = reference_turn_bot(rewards, mask, stream, call["uid"], gamma=0.5)
        np.testing.assert_allclose(call["advantages"], expected, atol=1e-4)
        assert (np.array(call["advantages"])[mask == 0] == 0).all(), "a tool token got an advantage"
        streams = [r["rewards"]["streams"]["turn_reward"] for r in scored]
        for m, u in zip(mask, stream, strict=True):
            assert any(np.allclose(u[: len(s)], s) and not u[len(s):].any() for s in streams), u  # the manager's
            if turn_count(m) >= 2:  # turn 0's tokens: their reward and their return differ by the later turns'
                later += bool(np.any(u[(m == 1) & (turn_ids(m) >= 1)] != 0))
    assert later > 0, "no rollout with a later turn that earned a reward"
    metrics = [json.loads(ln)["data"] for ln in run.metrics.read_text().splitlines() if ln.strip()]
    assert any("turn_bot/turns_per_rollout" in m and "reward/flag/wasted_call/mean" in m for m in metrics), metrics

