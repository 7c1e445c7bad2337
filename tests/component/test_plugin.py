"""verl loads verl-bot through its `verl.plugins` entry point, in a fresh process; a failed registration is one
ERROR line and leaves verl as it was."""

import json
import subprocess
import sys

import pytest

import verl_bot.plugin as plugin
from verl_bot.advantage import ESTIMATORS
from verl_bot.losses import LOSSES
from verl_bot.rewards.metrics import training_reward_metrics

PROBE = """
import verl
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
print("estimator", get_adv_estimator_fn("bot").__module__)
print("estimator", get_adv_estimator_fn("pure").__module__)
print("estimator", get_adv_estimator_fn("pass").__module__)
print("estimator", get_adv_estimator_fn("vps").__module__)
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
print("agent_loop", _agent_loop_registry["vps_single_turn"]["_target_"])
print("estimator", get_adv_estimator_fn("reco").__module__)
from verl.trainer.ppo.core_algos import get_policy_loss_fn
print("loss", get_policy_loss_fn("reco").__module__)
import verl.workers.engine_workers
print("ppo_loss", getattr(verl.workers.engine_workers.ppo_loss, "__verl_bot_hook__", False))
print("manager", get_reward_manager_cls("bot").__name__)
print("patched", getattr(AgentLoopOutput.as_dict, "__verl_bot_hook__", False))
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
print("streams", getattr(PPOTrainer._compute_advantage, "__verl_bot_hook__", False))
import verl.utils.config
print("preflight", getattr(verl.utils.config.validate_config, "__verl_bot_hook__", False))
import json
import verl_bot.plugin
first = verl_bot.plugin.register()
print("idempotent", verl_bot.plugin.register() is first and first.failure is None)
print("changes", json.dumps(first.changes))
"""


def test_plain_import_verl_registers_bot_in_a_fresh_process():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "estimator verl_bot.advantage.bot" in proc.stdout
    assert "estimator verl_bot.advantage.pure" in proc.stdout
    assert "estimator verl_bot.advantage.pass_" in proc.stdout
    assert "estimator verl_bot.advantage.vps" in proc.stdout
    assert "agent_loop verl_bot.vps.agent_loop.VPSAgentLoop" in proc.stdout
    assert "estimator verl_bot.advantage.reco" in proc.stdout
    assert "loss verl_bot.losses.reco" in proc.stdout
    assert "ppo_loss True" in proc.stdout
    assert "streams True" in proc.stdout
    assert "manager BoTRewardManager" in proc.stdout
    assert "patched True" in proc.stdout
    assert "preflight True" in proc.stdout
    assert "verl-bot" not in proc.stderr  # nothing to say in a process that does not run verl-bot
    # registering again changes nothing; each change once (in a fresh process: other tests' imports change the order)
    assert "idempotent True" in proc.stdout
    changes = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("changes "))[len("changes "):])
    kinds = ("adv_estimator", "policy_loss", "reward_manager", "agent_loop")
    entries = [c for c in changes if c.split(":")[0] in kinds]
    registered = [*(f"adv_estimator:{n}" for n in ESTIMATORS), *(f"policy_loss:{n}" for n in LOSSES)]
    assert sorted(entries) == sorted([*registered, "reward_manager:bot", "agent_loop:vps_single_turn"])
    assert {"bot", "grail", "pass", "pure", "reco", "vps", "turn_bot"} <= set(ESTIMATORS) and "reco" in LOSSES
    assert len(set(changes)) == len(changes)


def test_version_mismatch_fails_loudly(monkeypatch):
    import verl

    monkeypatch.setattr(verl, "__version__", "0.10.0")
    with pytest.raises(plugin.VerlApiMismatch, match="supports verl>=0.9.0,<=0.9.1, found verl==0.10.0"):
        plugin.check_verl_version()
    monkeypatch.setenv("VERL_BOT_ALLOW_VERL_MISMATCH", "1")
    plugin.check_verl_version()  # a warning only


def test_failed_registration_is_one_error_line_and_verl_runs_without_verl_bot():
    code = (
        "import verl; verl.__version__ = '9.9.9'; import verl_bot.verl_entry\n"
        "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
        "print('bot' in ADV_ESTIMATOR_REGISTRY, getattr(verl.utils.config.validate_config, '__verl_bot_hook__', 0))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "VERL_USE_EXTERNAL_PLUGINS": "none"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["False", "0"]
    lines = [line for line in proc.stderr.splitlines() if "verl-bot" in line]
    assert len(lines) == 1 and lines[0].startswith("ERROR:"), lines
    assert "verl-bot is off" in lines[0] and "found verl==9.9.9" in lines[0] and "unknown to verl" in lines[0]


def test_training_reward_metrics_average_over_all_rollouts_and_count_flags():
    """Every numeric key is averaged over ALL rollouts (absent = 0); `flags` become per-flag shares."""
    extra_fields = [
        {"reward_extra_info": {"score": 1.0, "compile": 0.0, "note": "x", "flags": "judge_unavailable"}},
        {"reward_extra_info": {"score": -1.0, "compile": 1.0, "scorer_failed": 1.0, "flags": ""}},
        {"reward_extra_info": {"score": 0.5, "flags": "judge_unavailable,steps_truncated"}},
        None,
    ]
    assert training_reward_metrics(extra_fields) == {
        "reward/score/mean": 0.5 / 4,
        "reward/compile/mean": 1 / 4,
        "reward/scorer_failed/mean": 1 / 4,
        "reward/flag/judge_unavailable/mean": 2 / 4,
        "reward/flag/steps_truncated/mean": 1 / 4,
    }
    assert training_reward_metrics([]) == {}


def test_on_a_verl_it_does_not_support_a_run_naming_verl_bot_stops_before_ray_in_one_line():
    """verl's own `validate_config` (which its driver calls before `ray.init`) refuses a config that names
    verl-bot, naming both versions; a stock config gets verl's own checks as before."""
    code = (
        "import verl; verl.__version__ = '9.9.9'; import verl_bot.verl_entry\n"
        "from verl.utils.config import validate_config\n"
        "from verl_bot.cpu.actor_engine import compose_trainer_config\n"
        "for estimator in ('grpo', 'bot'):\n"
        "    try:\n"
        "        validate_config(compose_trainer_config([f'algorithm.adv_estimator={estimator}']), False, False)\n"
        "    except Exception as exc:\n"
        "        print(estimator, type(exc).__name__, str(exc).splitlines()[0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    assert not lines.get("grpo", "").startswith("VerlBotConfigError"), lines  # verl's own checks, nothing more
    assert lines["bot"].startswith(
        "VerlBotConfigError verl-bot 0.1.0 cannot run with the installed verl 9.9.9 (supported: verl>=0.9.0,<=0.9.1): "
        "the run names verl-bot (algorithm.adv_estimator=bot); registering verl-bot in verl: VerlApiMismatch"
    ), lines
