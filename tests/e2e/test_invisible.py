"""Invisible unless used (issue 23): a verl environment with verl-bot installed runs stock verl as before.

1. every wrapper that sees the run's config passes a stock run through: the original with the same arguments,
   its result unchanged, no TransferQueue read, no process-global change;
2. what the hooks keep does not grow with the steps (1,000 steps of their logic, flat memory);
3. registration and every hook are one transaction: a failure undoes everything, in one ERROR line;
4. `import verl` imports nothing of verl's on verl-bot's account (benchmarks/import_verl.py times it);
5. verl's logging conventions; a name clash with a user's estimator or loss is one line naming both.

Subprocess tests start a fresh Python: registering in this process would change verl's globals for the others.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import tracemalloc
import types
from pathlib import Path

import pytest
import torch

from tests.conftest import compose_verl_config
from verl_bot import plugin
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks import driver
from verl_bot.hooks import transaction as _ledger
from verl_bot.hooks import validate_config as validate_hook
from verl_bot.hooks.v1 import (
    compute_advantage,
    compute_metrics,
    replay_buffer,
    tracker_panel,
    update_actor,
)
from verl_bot.hooks.wrap import wrap
from verl_bot.launch import activation as usage
from verl_bot.training import failures
from verl_bot.training.rows import DENSE_MARK, row_checksum

STOCK = ["algorithm.adv_estimator=grpo"]
BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"]


def fresh_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


class Recorder:
    """A stand-in for verl's original: records its arguments, returns one object."""

    def __init__(self):
        self.calls = []
        self.result = object()

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


class FakeTQ:
    """TransferQueue's `kv_batch_get` for the hooks: each row's extra_fields (as verl-bot's `as_dict` hook leaves
    a dense row's: `DENSE_MARK`, the checksum of its token rewards), data_source, token rewards and response mask
    (nested, as verl's v1 agent loop stores them); counts the reads."""

    REWARDS = torch.tensor([1.0, 1.0])

    def __init__(self, infos=None):
        self.reads = 0
        self.infos = infos

    def kv_batch_get(self, keys, partition_id, select_fields):
        self.reads += 1
        mark = {DENSE_MARK: row_checksum(self.REWARDS)}
        columns = {"extra_fields": [{"reward_extra_info": dict(self.infos or {}), **mark} for _ in keys],
                   "data_source": ["toy_lint"] * len(keys),
                   "rm_scores": torch.nested.nested_tensor([self.REWARDS] * len(keys), layout=torch.jagged),
                   "response_mask": torch.nested.nested_tensor([torch.ones(2)] * len(keys), layout=torch.jagged)}
        return {name: columns[name] for name in select_fields}


@pytest.fixture
def tq(monkeypatch):
    import transfer_queue

    fake = FakeTQ({"score": 1.0, "acc": 1.0})
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    return fake


def trainer(overrides):
    return types.SimpleNamespace(config=compose_verl_config(overrides), global_steps=1, total_training_steps=2)


def batch(n=4):
    return types.SimpleNamespace(keys=[f"u{i}_0_0" for i in range(n)], partition_id="train", tags=[{}] * n,
                                 extra_info={}, fields=None)


# ------------------------------------------------------------------------------------------------ 1. gated
TRAINER_HOOKS = [
    compute_advantage._make_compute_advantage,
    compute_metrics._make_compute_metrics,
    update_actor._make_update_actor,
]


@pytest.mark.parametrize("make", TRAINER_HOOKS, ids=lambda m: m.__name__)
def test_a_stock_run_gets_verls_method_as_it_is(make, tq):
    original = Recorder()
    stock, rows, metrics = trainer(STOCK), batch(), {"critic/score/mean": 0.5}
    assert make(original)(stock, rows, metrics, "extra", flag=True) is original.result
    (args, kwargs), = original.calls
    assert args[:3] == (stock, rows, metrics) and args[3:] == ("extra",) and kwargs == {"flag": True}
    assert all(a is b for a, b in zip(args, (stock, rows, metrics), strict=False))
    assert metrics == {"critic/score/mean": 0.5} and rows.extra_info == {}
    assert tq.reads == 0 and not [k for k in vars(stock) if k.startswith("_verl_bot")]


def test_a_verl_bot_run_gets_the_hooks(tq):
    """The same wrappers act on a run that uses verl-bot: the gate, not the data, decides."""
    metrics = {}
    compute_metrics._make_compute_metrics(Recorder())(trainer(BOT), batch(), metrics)
    assert metrics == {"reward/score/mean": 1.0, "reward/acc/mean": 1.0} and tq.reads == 1


@pytest.mark.parametrize(("overrides", "trackers"), [
    (STOCK, ["wandb", "tensorboard"]),  # a stock run: verl's step, whatever its trackers
    ([*BOT, "+algorithm.token_panel_every=0"], ["wandb", "tensorboard"]),  # panels turned off
    (BOT, ["console", "file"]),  # no tracker that shows a panel: nothing is read
], ids=["stock", "verl-bot-every-0", "verl-bot-scalar-trackers"])
def test_a_run_without_panels_leaves_its_tracker_files_as_verl_writes_them(overrides, trackers, tq, tmp_path,
                                                                            monkeypatch):
    """tracker_panel: the wrapped step is verl's (same arguments, its result), then verl's `Tracking` (real wandb
    offline, real TensorBoard event files) logs the step's scalars: the files hold those and nothing of verl-bot's;
    nothing was read from TransferQueue, nothing timed."""
    from tests.harness.trackers import offline_trackers, tensorboard_panels, wandb_history

    run, original, metrics, timing = trainer(overrides), Recorder(), {"reward/score/mean": 0.5}, {"gen": 1.0}
    with offline_trackers(tmp_path, monkeypatch, trackers) as run.logger:
        assert tracker_panel._make_step(original)(run, metrics, timing, "extra", flag=True) is original.result
        run.logger.log(data=metrics, step=1)
    assert original.calls == [((run, metrics, timing, "extra"), {"flag": True})]
    assert tq.reads == 0 and timing == {"gen": 1.0} and metrics == {"reward/score/mean": 0.5}
    assert not [k for k in vars(run) if k.startswith("_verl_bot")]
    if "wandb" in trackers:
        _, history = wandb_history(tmp_path)
        assert {k for items in history.values() for k in items if not k.startswith("_")} == {"reward/score/mean"}
        texts, histograms, scalars = tensorboard_panels(tmp_path / "tb")
        assert (texts, histograms, scalars) == ({}, {}, {"reward/score/mean"})


def test_a_bad_panel_knob_stops_a_verl_bot_run_before_its_first_step():
    original = Recorder()
    with pytest.raises(VerlBotConfigError, match=r"^\+algorithm.token_panel_rollouts=0: must be an integer >= 1$"):
        tracker_panel._make_step(original)(trainer([*BOT, "+algorithm.token_panel_rollouts=0"]), {}, {})
    assert original.calls == []


@pytest.mark.parametrize(("overrides", "markers"), [(STOCK, 0), (BOT, 1)], ids=["stock", "verl-bot"])
def test_a_rollout_lost_to_a_dead_engine_is_marked_only_in_a_verl_bot_run(overrides, markers, monkeypatch):
    """rollout_failure: verl's exception goes on either way; the marker the replay-buffer check reads is written
    to TransferQueue only for a run that uses verl-bot."""
    import asyncio

    import transfer_queue

    from verl_bot.hooks.v1 import rollout_failure

    class EngineDeadError(RuntimeError):
        pass

    async def original(self, sampling_params, trajectory, **kwargs):
        raise EngineDeadError("engine core died")

    puts = []

    async def put(**kwargs):
        puts.append(kwargs)

    monkeypatch.setattr(transfer_queue, "async_kv_put", put, raising=False)
    worker = types.SimpleNamespace(config=compose_verl_config(overrides))
    with pytest.raises(EngineDeadError):
        asyncio.run(rollout_failure._make_wrapper(original)(worker, {}, {"validate": False}, uid="u7"))
    assert len(puts) == markers
    if markers:
        assert puts[0]["key"] == "u7" + rollout_failure.MARKER_SUFFIX and puts[0]["partition_id"] == "train"


def test_the_replay_buffer_of_a_stock_run_is_verls_own():
    buffers = {}
    for name, overrides in (("stock", STOCK), ("bot", BOT)):
        buffer = types.SimpleNamespace(_terminal_eviction_reasons=Recorder())
        build = replay_buffer._make_build_replay_buffer(lambda self, buffer=buffer: buffer)
        assert build(trainer(overrides)) is buffer
        buffers[name] = buffer
    assert isinstance(buffers["stock"]._terminal_eviction_reasons, Recorder)
    assert not isinstance(buffers["bot"]._terminal_eviction_reasons, Recorder)  # armed


def test_validate_config_of_a_stock_run_changes_nothing_in_the_process(monkeypatch, caplog):
    started = []
    monkeypatch.setattr(validate_hook, "start_run", started.append)
    monkeypatch.setattr(driver, "_installed", False)  # a verl-bot run of an earlier test in this process set it
    process = lambda: (sys.excepthook, dict(os.environ), logging.getLogger().handlers[:],  # noqa: E731
                       logging.getLogger("verl_bot").handlers[:])
    before = process()
    original = Recorder()
    config = compose_verl_config(STOCK)
    with caplog.at_level(logging.DEBUG, logger="verl_bot"):
        assert validate_hook._make_validate_config(original)(config, use_reference_policy=False, use_critic=False) is (
            original.result)
    assert original.calls == [((config,), {"use_reference_policy": False, "use_critic": False})]
    assert started == [] and not driver._installed
    assert not [r for r in caplog.records if r.name.startswith("verl_bot")]
    assert process() == before


def test_a_verl_bot_run_starts_with_its_checks_its_last_words_and_one_info_line(monkeypatch, caplog, tmp_path):
    import pandas as pd

    installed = []
    monkeypatch.setattr(driver, "install", lambda: installed.append(True))
    data = tmp_path / "train.parquet"
    pd.DataFrame({"data_source": ["toy_lint"], "prompt": [[{"role": "user", "content": "x"}]]}).to_parquet(data)
    config = compose_verl_config([*BOT, f"data.train_files={data}", f"data.val_files={data}"])
    with caplog.at_level(logging.INFO, logger="verl_bot"):
        validate_hook._make_validate_config(Recorder())(config, use_reference_policy=False, use_critic=False)
    assert installed == [True]
    assert [r.getMessage() for r in caplog.records if r.name == "verl_bot"] == [
        "verl-bot 0.1.0 is in use in this run (algorithm.adv_estimator=bot); the v1 trainer path; bot manager: dense "
        "token rewards, r_t = w_g * G + w_s * S_t on every token; VERL_USE_EXTERNAL_PLUGINS=none turns it off"
    ]
    bad = compose_verl_config([*BOT, "algorithm.use_kl_in_reward=true"])
    with pytest.raises(VerlBotConfigError, match="use_kl_in_reward"):
        validate_hook._make_validate_config(Recorder())(bad, use_reference_policy=False, use_critic=False)


@pytest.mark.parametrize(
    "overrides, why",
    [
        (STOCK, None),
        (["algorithm.adv_estimator=gae"], None),
        (["reward.reward_manager.name=dapo"], None),
        (BOT, "algorithm.adv_estimator=bot"),
        (["reward.reward_manager.name=bot"], "reward.reward_manager.name=bot"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=reco"], "actor_rollout_ref.actor.policy_loss.loss_mode=reco"),
        (["actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn"],
         "actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn"),
        (["+algorithm.token_report_steps=[1]"], "algorithm.token_report_steps"),
        (["+algorithm.reco_rvar_cap=2.0"], "algorithm.reco_rvar_cap"),
        (["+reward.reward_kwargs.bot.w_local=0.5"], "reward.reward_kwargs.bot"),
    ],
)
def test_a_run_uses_verl_bot_when_its_config_names_it(overrides, why):
    config = compose_verl_config(overrides)
    assert usage.why(config) == why
    assert usage.reason(config) == why and usage.reason(config) == why  # decided once per config object


# ------------------------------------------------------------------------------------------ 2. bounded
def test_a_thousand_steps_of_the_hooks_keep_flat_memory(monkeypatch, tq):
    """The replay buffer's check, the advantage and metrics wrappers of a verl-bot run, steps of 8 groups of 4
    rollouts each (verl consumes the groups it sampled): over 1,000 steps after 500, what the hooks keep
    stays the same size (the replay buffer's set of read groups grew by ~500 bytes a step before)."""
    run = trainer(BOT)
    buffer = types.SimpleNamespace(finished_keys={"train": set()}, failure_keys={"train": set()},
                                   partitions={"train": {}}, _terminal_eviction_reasons=lambda *a: None)
    replay_buffer.arm(buffer)
    data = types.SimpleNamespace(batch={})  # verl's advantage step through verl-bot's failed-row exclusion, as in verl
    advantage = compute_advantage._make_compute_advantage(
        lambda *args, **kwargs: failures.advantages_without_failures(lambda d: None, data, "grpo"))
    metrics_hook = compute_metrics._make_compute_metrics(lambda *args, **kwargs: None)

    def step(i):
        uids = {f"{i:05d}g{g}" for g in range(8)}
        buffer.finished_keys["train"] |= uids
        buffer.partitions["train"].update({f"{u}_{r}_0": {} for u in uids for r in range(4)})
        buffer._terminal_eviction_reasons(i, "train")
        rows = batch(32)
        advantage(run, rows, {})
        metrics_hook(run, rows, {})
        buffer.finished_keys["train"] -= uids  # sampled: verl clears the groups
        buffer.partitions["train"].clear()

    tracemalloc.start()
    try:
        for i in range(500):  # torch keeps a pool of a few hundred small objects, filled in the first steps
            step(i)
        gc.collect()
        before = tracemalloc.take_snapshot()
        for i in range(500, 1500):
            step(i)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    # per step: the advantage's rows and their token rewards (the checksums), the metrics' rows, the buffer's new groups
    assert tq.reads == 4 * 1500
    # 64 B a step: torch's tensor constructor keeps a pool of 64-byte blocks that fills slowly (seen: 7-18 KB over
    # these 1,000 steps, at the hooks' torch.tensor lines); the replay buffer's uid set grew by ~500 B a step
    assert grown < 64 * 1000, f"the hooks' state grew by {grown} bytes over 1,000 steps: " + "; ".join(
        str(stat) for stat in after.compare_to(before, "lineno")[:5])
    assert len(buffer._verl_bot_checked_uids["train"]) == 8  # the last step's groups only


# -------------------------------------------------------------------------------------- 3. all or nothing
TRANSACTION = r"""
import json, sys
import verl, verl.utils.config as config
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
state = lambda: [sorted(core_algos.ADV_ESTIMATOR_REGISTRY), sorted(core_algos.POLICY_LOSS_REGISTRY),
                 {k: id(v) for k, v in vars(PPOTrainer).items()},
                 id(getattr(config.validate_config, "__wrapped__", config.validate_config)),  # under the refuser
                 id(trainer_base.compute_advantage_for_multi_trajectories)]
before = state()
del PPOTrainer._update_actor  # a method verl renamed
before[2].pop("_update_actor")
import verl_bot.plugin
ledger = verl_bot.plugin.register()
import verl.workers.engine_workers as workers  # a later import changes nothing either
print(json.dumps({"same": state() == before, "failure": ledger.failure, "changes": ledger.changes,
                  "ppo_loss": getattr(workers.ppo_loss, "__verl_bot_hook__", False),
                  "refuser": getattr(config.validate_config, "__verl_bot_refuser__", False), "meta_path": [
                  type(f).__module__ for f in sys.meta_path]}))
"""


def test_a_failing_hook_undoes_everything_in_one_error_line():
    proc = fresh_python(TRANSACTION, VERL_USE_EXTERNAL_PLUGINS="none")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["same"] and out["changes"] == [] and out["ppo_loss"] is False
    assert out["refuser"] is True  # verl's validate_config, wrapped only to refuse runs that name verl-bot
    assert "verl_bot.hooks.on_import" not in out["meta_path"]
    assert "VerlApiMismatch" in out["failure"] and "PPOTrainer._update_actor" in out["failure"]
    errors = [line for line in proc.stderr.splitlines() if "verl-bot" in line]
    assert len(errors) == 1 and errors[0].startswith("ERROR:"), errors
    assert "verl.trainer.ppo.v1.trainer_base.PPOTrainer._update_actor" in errors[0] and "undone" in errors[0]


def test_a_missing_verl_method_is_a_verl_api_mismatch_naming_it():
    from verl_bot.hooks.compat import VerlApiMismatch

    class Trainer:
        pass

    with pytest.raises(VerlApiMismatch, match=r"has no tests\.e2e\.test_invisible\..*Trainer\._update_actor$"):
        wrap(Trainer, "_update_actor", ["self"], lambda original: original)


def test_the_ledger_undoes_every_change_newest_first_and_then_refuses_more(monkeypatch, caplog):
    class Base:
        def method(self):
            return "base"

    class Child(Base):
        pass

    registry = {"kept": 1}
    ledger = _ledger.Ledger()
    monkeypatch.delenv("VB_LEDGER_TEST", raising=False)

    def changes():
        ledger.setattr(Child, "method", lambda self: "wrapped", "Child.method")
        ledger.setitem(registry, "ours", 2, "registry:ours")
        ledger.setitem(registry, "kept", 3, "registry:kept")
        ledger.setenv("VB_LEDGER_TEST", "1", "env")

    ledger.step("first", changes)
    assert Child().method() == "wrapped" and registry == {"kept": 3, "ours": 2} and os.environ["VB_LEDGER_TEST"]
    with caplog.at_level(logging.ERROR, logger="verl_bot"):
        assert ledger.step("second", lambda: 1 / 0) is None
    assert Child().method() == "base" and "method" not in vars(Child)  # inherited again
    assert registry == {"kept": 1} and "VB_LEDGER_TEST" not in os.environ
    assert ledger.failure == "second: ZeroDivisionError: division by zero"
    (record,) = caplog.records
    assert "4 change(s) to verl were undone" in record.getMessage()
    assert ledger.step("third", lambda: "never") is None
    with pytest.raises(_ledger.VerlBotOff):
        ledger.setitem(registry, "late", 4, "late")
    assert registry == {"kept": 1}


# ------------------------------------------------------------------------------------------------ 4. cheap
def test_import_verl_imports_nothing_of_verls_for_verl_bot():
    """benchmarks/import_verl.py, once: with the plugin, `import verl` imports verl-bot's plugin machinery and
    nothing else (a bug here shows as verl's trainer, engines or TransferQueue modules in the list)."""
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "import_verl.py"
    proc = subprocess.run([sys.executable, str(bench), "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ratio plugin/none: time " in proc.stdout
    extra = proc.stdout.split("imported only with the plugin")[1].split(": ", 1)[1].strip().split(", ")
    assert extra and all(name == "verl_bot" or name.startswith("verl_bot.") for name in extra), extra
    # they wait for a run
    assert not {"verl_bot.advantage", "verl_bot.launch.preflight", "verl_bot.launch.activation"} & set(extra)


WORKER = r"""
import json, sys
import verl
import verl.experimental.reward_loop.reward_loop  # what a reward worker of a stock run imports, and uses:
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
assert get_reward_manager_cls("naive").__name__ == "NaiveRewardManager"
from verl_bot.hooks.transaction import LEDGER
print(json.dumps({"changes": LEDGER.changes, "core_algos": "verl.trainer.ppo.core_algos" in sys.modules}))
"""


def test_a_reward_worker_gets_the_reward_manager_and_nothing_of_the_trainer():
    """A process that does not train installs only what it uses: a reward worker imports verl's reward loop, so
    verl-bot registers its manager there and hooks the worker's scoring (`reward_model_path`: for the `bot`
    manager only), and neither imports verl's trainer code nor hooks it."""
    proc = fresh_python(WORKER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    changes = ["config.validate_config", "RewardLoopWorker.compute_score", "reward_manager:bot"]
    assert out == {"changes": changes, "core_algos": False}


# ---------------------------------------------------------------------------------------------- 5. logging
@pytest.mark.parametrize(
    "environ, level",
    [
        ({}, logging.INFO),
        ({"VERL_BOT_LOG_LEVEL": "info"}, logging.INFO),
        ({"VERL_BOT_LOG_LEVEL": "Warning"}, logging.WARNING),
        ({"VERL_LOGGING_LEVEL": "WARN"}, logging.WARNING),
        ({"VERL_BOT_LOG_LEVEL": "debug", "VERL_LOGGING_LEVEL": "ERROR"}, logging.DEBUG),
        ({"VERL_BOT_LOG_LEVEL": "loud", "VERL_LOGGING_LEVEL": "error"}, logging.ERROR),
    ],
)
def test_the_log_level_follows_verl_bot_then_verl_in_any_case(environ, level):
    assert plugin.log_level(environ) == level


def test_verl_bots_logger_goes_through_verls_root_handler():
    plugin.register()
    logger = logging.getLogger("verl_bot")
    assert logger.handlers == [] and logger.propagate


CLASH = r"""
from verl.trainer.ppo import core_algos

def my_pass(*args, **kwargs): ...
def my_reco(*args, **kwargs): ...

core_algos.register_adv_est("pass")(my_pass)
core_algos.register_policy_loss("reco")(my_reco)
import verl_bot.plugin
ledger = verl_bot.plugin.register()
print(core_algos.ADV_ESTIMATOR_REGISTRY["pass"] is my_pass, core_algos.POLICY_LOSS_REGISTRY["reco"] is my_reco,
      "bot" in core_algos.ADV_ESTIMATOR_REGISTRY)
"""


def test_a_users_own_estimator_of_the_same_name_is_one_error_naming_both_and_stays():
    proc = fresh_python(CLASH, VERL_USE_EXTERNAL_PLUGINS="none")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "True", "False"]  # the user's entries stay, verl-bot is off
    errors = [line for line in proc.stderr.splitlines() if "verl-bot" in line]
    assert len(errors) == 1, errors
    assert "adv_estimator 'pass' is already registered in verl as __main__.my_pass" in errors[0]
    assert "verl_bot.advantage.pass_.compute_pass_advantage is not" in errors[0]


def test_a_weight_sync_timeout_of_0_leaves_verls_socket_as_it_is(monkeypatch):
    """weight_sync's W2 (the one wrapper any run gets, on the failure path): VERL_BOT_WEIGHT_SYNC_TIMEOUT_S=0 turns
    it off; the default watches for 120 s without progress."""
    from verl_bot.hooks import weight_sync

    monkeypatch.setenv(weight_sync.TIMEOUT_ENV, "0")
    assert weight_sync.install_sender() == []
    monkeypatch.delenv(weight_sync.TIMEOUT_ENV)
    assert weight_sync.timeout_s() == weight_sync.DEFAULT_TIMEOUT_S == 120.0
