"""verl 0.9.1's trainer modes and features with `bot` (docs/verl_setup.md, "Trainer modes and features").

Two trainer starts, each 2 steps of `bot` on the toy_lint task of tests/harness/trainer.py (its probe records the
advantage step: each row's token rewards and advantages):

- LoRA (`actor_rollout_ref.model.lora_rank=8`) on verl's vLLM rollout: the actor is a PEFT model, vLLM samples
  with the adapter the trainer updated (step 2's rollout log-probs match the actor's to 1e-5: an engine without
  the updated adapter is ~1e-4 off here), dense rewards reach `bot`;
- `colocate_async` on verl-bot's hf rollout: step 2 trains on rollouts one update old (verl's staleness metric
  is 1, where `sync` gives 0), dense rewards reach `bot`.

The refusals (`verl_bot/launch/trainer_modes.py`) are checked on verl's composed config, as the driver checks it
before Ray: `separate_async` on the CPU and verl's own `separate_async` assertions, unmerged LoRA on the hf
rollout.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import compose_verl_config
from tests.harness.references import reference_bot
from tests.harness.trainer import Run, advantage_records
from verl_bot.cpu import overrides
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch.preflight import check_config
from verl_bot.launch.trainer_modes import separate_async_problem

pytestmark = pytest.mark.timeout(900)
BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot", "+reward.reward_kwargs.bot.w_local=0.5"]


def _metrics(run: Run) -> dict[int, dict]:
    lines = [json.loads(ln) for ln in run.metrics.read_text().splitlines() if ln.strip()]
    return {m["step"]: m["data"] for m in lines if "actor/pg_loss" in m["data"]}


def _train(workdir, name: str, extra: list[str], rollout: str) -> tuple[Run, dict[int, dict]]:
    run = Run(workdir, name, [*BOT, *extra], rollout=rollout).start()
    try:
        rc = run.wait(timeout=700)
    finally:
        run.cleanup()
    assert rc == 0, run.output(6000)
    metrics = _metrics(run)
    assert sorted(metrics) == [1, 2], metrics
    return run, metrics


def _check_dense_bot(run: Run) -> None:
    """Every step's token rewards are dense (more than one value per response) and the advantages are BoT's of those
    rewards (the slow reference of tests/harness/references.py)."""
    steps = advantage_records(run)
    assert len(steps) == 2, steps
    for step in steps:
        rows = step["rows"]
        assert len(rows) == 16 and not any(r["failed"] for r in rows)
        assert any(len(set(r["rewards"])) > 1 for r in rows), "no dense reward row: G alone reached the estimator"
        width = max(len(r["rewards"]) for r in rows)
        rewards = torch.tensor([r["rewards"] + [0.0] * (width - len(r["rewards"])) for r in rows])
        mask = torch.tensor([[1.0] * len(r["rewards"]) + [0.0] * (width - len(r["rewards"])) for r in rows])
        got = torch.tensor([r["advantages"] + [0.0] * (width - len(r["advantages"])) for r in rows])
        expected = reference_bot(rewards, mask, [r["uid"] for r in rows])
        torch.testing.assert_close(got.double(), expected, atol=1e-4, rtol=1e-4)
        assert expected.abs().max() > 0


def test_lora_on_vllm_samples_the_updated_adapter_and_trains_bot(workdir):
    run, metrics = _train(
        workdir, "lora", ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16"], "vllm"
    )
    assert "PeftModelForCausalLM" in run.output(), run.output(4000)  # the actor trains an adapter
    assert metrics[1]["actor/grad_norm"] > 0
    # step 2 samples after the first update: vLLM must serve the adapter the trainer just changed
    assert metrics[2]["training/rollout_probs_diff_max"] <= 1e-5, metrics[2]
    _check_dense_bot(run)


def test_colocate_async_trains_bot_one_update_off_policy(workdir):
    run, metrics = _train(workdir, "colocate_async", ["trainer.v1.trainer_mode=colocate_async"], "hf")
    assert metrics[1]["training/off_policy/trajectory_staleness/max"] == 0
    assert metrics[2]["training/off_policy/trajectory_staleness/min"] == 1  # sampled while step 1 trained
    _check_dense_bot(run)


def _config(*extra: str):
    return compose_verl_config([*overrides(rollout="hf"), *BOT, "actor_rollout_ref.model.path=/nonexistent",
                                "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", *extra])


SEPARATE = ["trainer.v1.trainer_mode=separate_async", "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2"]


def test_separate_async_is_refused_on_the_cpu_before_ray():
    with pytest.raises(VerlBotConfigError, match="separate_async needs a checkpoint engine .* CPU platform has none"):
        check_config(_config(*SEPARATE))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["trainer.v1.separate_async.parameter_sync_step=2"], r"got 8 != 2 x 2"),
        ([], r"needs a standalone rollout pool"),
        (["actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=2"],
         r"checkpoint_engine.backend=nccl"),
    ],
)
def test_separate_async_on_a_gpu_node_is_checked_as_verl_would_after_ray(extra, message):
    """verl's own `PPOTrainerSeparateAsync.__init__` assertions, one line each before Ray; a config that passes them
    passes."""
    config = _config(*SEPARATE, "trainer.v1.separate_async.parameter_sync_step=4", *extra)
    assert message in (separate_async_problem(config, on_cpu=False) or ""), separate_async_problem(config, False)
    ready = _config(*SEPARATE, "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=2",
                    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl")
    assert separate_async_problem(ready, on_cpu=False) is None


def test_unmerged_lora_on_the_hf_rollout_is_refused_before_ray():
    with pytest.raises(VerlBotConfigError, match=r"lora_rank=8 with verl-bot's hf rollout: it loads merged weights"):
        check_config(_config("actor_rollout_ref.model.lora_rank=8"))
    check_config(_config("actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora.merge=true"))
