"""The touch-point check (`verl_bot.hooks.touch_points`): what `python -m verl_bot.hooks.touch_points` prints for the
installed verl and for a verl whose API moved, and the driver's stop before Ray on such a verl.

A verl "whose API moved" is the installed one changed as an upgrade would change it, before verl-bot's hooks see
it: a `sitecustomize` on PYTHONPATH schedules, ahead of verl-bot's steps, one renamed parameter
(`RayPPOTrainer._update_actor(self, data)`) and one method gone (`PPOTrainer.step`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import compose_verl_config
from tests.harness.touch_points import json_report
from verl_bot.advantage import ESTIMATORS
from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks import PLAN, TRAINER_PATHS, VLLM_ROLLOUT, touch_points
from verl_bot.hooks.compat import Finding, collecting, supports
from verl_bot.losses import LOSSES

MOVED = """\
from verl_bot.hooks.on_import import when_imported

def _rename():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    RayPPOTrainer._update_actor = lambda self, data: None

def _remove():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    del PPOTrainer.step

when_imported("verl.trainer.ppo.ray_trainer", _rename)
when_imported("verl.trainer.ppo.v1.trainer_base", _remove)
"""
CHANGED = ("RayPPOTrainer._update_actor", "changed",
           "RayPPOTrainer._update_actor has parameters ['self', 'data'], expected ['self', 'batch']")
MISSING = ("PPOTrainer.step", "missing", "verl 0.9.1 has no verl.trainer.ppo.v1.trainer_base.PPOTrainer.step")


@pytest.fixture(scope="module")
def moved_verl(tmp_path_factory) -> dict[str, str]:
    """The environment of a process whose verl has the two moves of `MOVED`."""
    folder = tmp_path_factory.mktemp("moved_verl")
    (folder / "sitecustomize.py").write_text(MOVED)
    path = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "VERL_PLATFORM": "cpu"}


def test_every_touch_point_of_both_trainer_paths_is_found_in_the_installed_verl():
    """Each step of `PLAN` contributes its touch points; each path has its own and both share the rest. (vLLM's
    rollout imports only with the CPU backend in this process: the command's test below checks it.)"""
    found = {path: touch_points.check(path, lambda module: not module.startswith(VLLM_ROLLOUT))
             for path in TRAINER_PATHS}
    assert {f.status for fs in found.values() for f in fs} == {"found"}, found
    labels = {path: {f.label for f in fs} for path, fs in found.items()}
    assert {"PPOTrainer._compute_advantage", "PPOTrainer.step", "AgentLoopOutput.as_dict",
            "ReplayBuffer._materialize_batch", "ReplayBuffer._dapo_filtered_keys"} <= labels["v1"] - labels["legacy"]
    assert {"RayPPOTrainer.__init__", "ray_trainer.compute_advantage", "metric_utils.compute_data_metrics",
            "AgentLoopWorker._postprocess", "RayPPOTrainer._update_actor",
            "separation.ray_trainer.compute_advantage"} <= labels["legacy"] - labels["v1"]
    methods = {f"adv_estimator:{name}" for name in ESTIMATORS} | {f"policy_loss:{name}" for name in LOSSES}
    assert {"config.validate_config", "main_ppo.run_ppo", "reward_manager:bot", "engine_workers.ppo_loss",
            "FileLogger.__init__", *methods} <= labels["v1"] & labels["legacy"]
    assert (len(labels["v1"]), len(labels["legacy"])) == (25 + len(methods), 20 + len(methods))


def test_a_dry_check_changes_nothing_in_verl():
    """`compat.collecting()` looks up and checks: verl's methods stay verl's (or verl-bot's, as they were)."""
    from verl.trainer.ppo import ray_trainer

    before = vars(ray_trainer.RayPPOTrainer).copy(), ray_trainer.compute_advantage
    with collecting() as findings:
        touch_points.run_step("legacy.trainer:install")
    assert vars(ray_trainer.RayPPOTrainer) == before[0] and ray_trainer.compute_advantage is before[1]
    assert [f.label for f in findings] == ["RayPPOTrainer.__init__", "ray_trainer.compute_advantage",
                                           "Tracking.log"]


def test_a_module_verl_does_not_have_is_missing_and_one_that_does_not_import_is_not_checked(monkeypatch, tmp_path):
    monkeypatch.setattr("verl_bot.hooks.PLAN",
                        (*PLAN, ("verl.trainer.ppo.v2_trainer", "v1.compute_advantage:install", "v1")))
    findings = touch_points.check("v1", lambda module: module == "verl.trainer.ppo.v2_trainer")
    assert findings == [Finding("verl.trainer.ppo.v2_trainer", "missing", "verl 0.9.1 has no module "
                                                                           "verl.trainer.ppo.v2_trainer")]
    (tmp_path / "verl_bot_test_broken.py").write_text("raise ValueError('vllm version None not supported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert touch_points.import_finding("verl_bot_test_broken") == Finding(
        "verl_bot_test_broken", "not checked",
        "verl_bot_test_broken does not import here: ValueError: vllm version None not supported")


def test_the_command_names_what_moved_with_exit_status_1(moved_verl):
    proc, report = json_report(moved_verl)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert report["verl"] == "0.9.1" and supports(report["verl"])
    problems = {path: [tuple(f.values()) for f in fs if f["status"] != "found"] for path, fs in report["paths"].items()}
    assert problems == {"v1": [MISSING], "legacy": [CHANGED]}  # vLLM's rollout included (VERL_PLATFORM=cpu)
    methods = len(ESTIMATORS) + len(LOSSES)
    assert [len(fs) for fs in report["paths"].values()] == [28 + methods, 23 + methods]
    found = {path: [Finding(**f) for f in fs] for path, fs in report["paths"].items()}
    text = touch_points.render("0.9.1", {"legacy": found["legacy"]}).splitlines()  # the command without --json
    assert text[2] == (f"legacy trainer path (trainer.use_v1=false): {22 + methods} found, 1 changed, 0 missing, "
                       "0 not checked")
    assert text[3].split() == ["found", "config.validate_config"]
    assert [line.split(None, 2) for line in text if "changed " in line] == [["changed", *CHANGED[::2]]]


@pytest.mark.parametrize(("path", "moved"), [("legacy", CHANGED), ("v1", MISSING)])
def test_a_verl_bot_run_on_a_verl_whose_touch_point_moved_stops_in_its_driver_before_ray(moved_verl, path, moved):
    """verl's own driver (`python -m verl.trainer.main_ppo`): its last line names both versions, the trainer path
    and what moved; Ray never starts. A stock run of the same verl is not stopped by verl-bot."""
    use_v1 = "true" if path == "v1" else "false"
    args = [sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=bot",
            f"trainer.use_v1={use_v1}", "actor_rollout_ref.model.path=/nonexistent",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1"]
    started = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=moved_verl)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        "verl-bot: run stopped: VerlBotConfigError: verl-bot 0.1.0 cannot run with the installed verl 0.9.1 "
        f"(supported: verl>=0.9.0,<=0.9.1): on "
        f"the {path} trainer path (trainer.use_v1={use_v1}) {moved[0]} {moved[1]} ({moved[2]}); "
        "`python -m verl_bot.hooks.touch_points` lists every touch point"
    ), proc.stderr[-3000:]
    assert "ray init kwargs" not in proc.stdout and time.monotonic() - started < 120


def test_the_driver_check_skips_vllms_rollout_for_another_rollout():
    config = compose_verl_config(["trainer.use_v1=false", "actor_rollout_ref.rollout.name=hf"])
    wanted = touch_points.run_modules(config)
    assert not wanted("verl.workers.rollout.vllm_rollout.utils") and wanted("verl.workers.engine_workers")
    touch_points.require(config, "legacy")  # the installed verl: nothing to stop


def test_a_ledger_failure_in_the_driver_stops_the_run(monkeypatch):
    from verl_bot.hooks.transaction import LEDGER

    monkeypatch.setattr(LEDGER, "failure", "registering verl-bot in verl: VerlApiMismatch: something")
    config = compose_verl_config(["actor_rollout_ref.rollout.name=hf"])
    with pytest.raises(VerlBotConfigError, match="verl-bot is off in this process: registering verl-bot in verl"):
        touch_points.require(config, "v1")
