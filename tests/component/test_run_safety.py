"""Runs never degrade silently: start-up refusals, failed scorers out of their groups, scalar rewards refused,
the fatal marker, the failure-rate stop, the driver's last line. Everything runs verl 0.9.1's own code where the
item is about verl (its composed config, `compute_advantage_for_multi_trajectories`, its estimators)."""

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.trainer.ppo.v1 import trainer_base

from tests.conftest import compose_verl_config
from tests.harness.advantage_step import dense_group_batch, run_verl
from tests.harness.config import BOT, config
from verl_bot.advantage.bot import bot_advantage, broadcast_row_sums, scalar_layout
from verl_bot.advantage.pure import pure_advantage
from verl_bot.credit.context import BatchContext, current, use_context
from verl_bot.credit.token_credit import clip_local
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.hooks import driver
from verl_bot.hooks.v1.replay_buffer import first_fatal
from verl_bot.launch.preflight import check_config
from verl_bot.rewards.settings import manager_settings
from verl_bot.training.context import check_failure_rate, failed_mask
from verl_bot.training.failures import exclusion_uids


# ------------------------------------------------------------------------------------------- start-up
def test_a_valid_bot_run_passes_and_plain_verl_is_not_checked(tmp_path):
    check_config(config(tmp_path, *BOT))
    check_config(config(tmp_path, "algorithm.adv_estimator=grpo", "reward.reward_manager.name=naive",
                        "trainer.use_v1=false", data_sources=("nope",)))  # no verl-bot part: untouched
    with pytest.raises(VerlBotConfigError, match="no scorer for data_source='nope'"):  # what a bot run is refused
        check_config(config(tmp_path, *BOT, data_sources=("nope",)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("algorithm.adv_estimator=bot", "reward.reward_manager.name=naive"),
         "reward.reward_manager.name=naive gives one scalar per response"),
        ((*BOT, "+reward.reward_kwargs.bot.token_level=false"), "token_level=false gives G on the last token only"),
        (("algorithm.adv_estimator=pure", "reward.reward_manager.name=naive"), "adv_estimator=pure needs a reward"),
        ((*BOT, "algorithm.use_kl_in_reward=true"), "use the actor's KL loss"),
        (("algorithm.adv_estimator=pure", "reward.reward_manager.name=bot", "algorithm.use_kl_in_reward=true"),
         "use_kl_in_reward=true with adv_estimator=pure"),
        ((*BOT, "reward.reward_model.enable=true"), "would bypass the bot manager"),
        ((*BOT, "+reward.reward_kwargs.bot.w_lcoal=1"), r"^unknown \+reward.reward_kwargs.bot.w_lcoal: the bot"),
        ((*BOT, "+algorithm.bot_std_floor=-1"), r"^\+algorithm.bot_std_floor=-1: must be a finite number >= 0$"),
        ((*BOT, "+reward.reward_kwargs.bot.scorers.toy_lint=builtin:nope"), "unknown builtin scorer 'nope'"),
        ((*BOT, "+reward.reward_kwargs.bot.scorers.toy_lint=python:no_such_module_x:f"), "no_such_module_x"),
        ((*BOT, "+algorithm.token_panel_rollouts=0"), r"^\+algorithm.token_panel_rollouts=0: must be an integer >= 1$"),
        ((*BOT, "+algorithm.token_panel_every=ten"), r"^\+algorithm.token_panel_every='ten': must be an integer >= 0$"),
    ],
)
def test_what_cannot_work_is_refused_with_one_line(tmp_path, overrides, message):
    with pytest.raises(VerlBotConfigError, match=message) as err:
        check_config(config(tmp_path, *overrides))
    assert "\n" not in str(err.value)


def test_a_data_source_without_scorer_is_named_with_its_file_and_the_fix(tmp_path):
    cfg = config(tmp_path, *BOT, data_sources=("toy_lint", "nope", "nada"))
    expected = r"no scorer for data_source='nada' \(in .*train.parquet\) nor \['nope'\]; no reward.custom_reward_f"
    with pytest.raises(VerlBotConfigError, match=expected):
        check_config(cfg)
    check_config(config(tmp_path, *BOT, "+reward.reward_kwargs.bot.scorers.nope=builtin:toy_lint",
                        "+reward.reward_kwargs.bot.scorers.nada=http://127.0.0.1:1", data_sources=("nope", "nada")))


def test_data_sources_of_verls_reward_functions_are_served(tmp_path, tmp_path_factory):
    check_config(config(tmp_path, *BOT, data_sources=("openai/gsm8k", "lighteval/MATH")))
    custom = tmp_path_factory.mktemp("fn") / "fn.py"
    custom.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    check_config(config(tmp_path, *BOT, f"reward.custom_reward_function.path={custom}", data_sources=("mine",)))
    with pytest.raises(VerlBotConfigError, match="no scorer for data_source='mine'"):  # without the function
        check_config(config(tmp_path, *BOT, data_sources=("mine",)))


def test_broadcast_knob_lets_bot_run_on_a_scalar_manager(tmp_path):
    check_config(config(tmp_path, "algorithm.adv_estimator=bot", "reward.reward_manager.name=naive",
                        "+algorithm.bot_broadcast_scalar=true"))
    with pytest.raises(VerlBotConfigError, match="reward.reward_manager.name=naive gives one scalar per response"):
        check_config(config(tmp_path, "algorithm.adv_estimator=bot", "reward.reward_manager.name=naive"))


# -------------------------------------------------------------------------- scalar rewards at the estimator
def scalar_batch():
    """Rewards as verl's naive manager writes them: one score on each response's last valid token."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros(4, 4)
    rewards[0, 2], rewards[1, 1], rewards[2, 3], rewards[3, 0] = 1.0, 0.0, -2.0, 3.0
    return rewards, mask


def test_scalar_layout_is_detected_exactly():
    rewards, mask = scalar_batch()
    assert scalar_layout(rewards, mask)
    dense = rewards.clone()
    dense[0, 0] = 1e-3  # one reward before the last token
    assert not scalar_layout(dense, mask)
    assert not scalar_layout(torch.zeros(4, 4), mask)  # nothing to tell apart: harmless, not refused


def test_bot_refuses_scalar_rewards_through_verls_compute_advantage():
    rewards, mask = scalar_batch()
    with pytest.raises(VerlBotConfigError, match=r"reward.reward_manager.name=bot.*bot_broadcast_scalar=true"):
        run_verl("bot", rewards, mask, ["a", "a", "b", "b"])


def test_broadcast_knob_makes_bot_grpo_with_the_population_std():
    rewards, mask = scalar_batch()
    uids = ["a", "a", "b", "b"]
    out = run_verl("bot", rewards, mask, uids, ["+algorithm.bot_broadcast_scalar=true"])
    scores = rewards.sum(dim=1)
    expected = torch.zeros(4, 4)
    for group in ({0, 1}, {2, 3}):
        rows = sorted(group)
        mean, std = scores[rows].mean(), scores[rows].std(unbiased=False)
        for r in rows:
            expected[r] = (scores[r] - mean) / (std + 1e-6) * mask[r]
    torch.testing.assert_close(out.batch["advantages"], expected)
    torch.testing.assert_close(broadcast_row_sums(rewards, mask), scores[:, None] * mask)


def test_dense_rewards_of_the_bot_manager_are_never_refused_even_when_they_look_scalar():
    """BoT on the bag, by hand: group a pools 3 tokens of weight 1/6 (rewards 0, 0, 1) and 2 of weight 1/4 (0, 0):
    mean 1/6, variance 5/36; group b 4 tokens of 1/8 (0, 0, 0, -2) and 1 of 1/2 (3): mean 5/4, variance 55/16."""
    rewards, mask = scalar_batch()
    with use_context(BatchContext(dense_rewards=True)):
        out = run_verl("bot", rewards, mask, ["a", "a", "b", "b"])
    sa, sb = 5**0.5 / 6 + 1e-6, 55**0.5 / 4 + 1e-6
    a0, b0 = -(1 / 6) / sa, -(5 / 4) / sb
    expected = torch.tensor([[a0, a0, (1 - 1 / 6) / sa, 0], [a0, a0, 0, 0],
                             [b0, b0, b0, (-2 - 5 / 4) / sb], [(3 - 5 / 4) / sb, 0, 0, 0]])
    torch.testing.assert_close(out.batch["advantages"], expected, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------- failed scorers: advantage 0
def test_exclusion_uids_hand_computed():
    uids = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
    failed = np.array([True, False, False, True, False, False])
    new, zero = exclusion_uids(uids, failed)
    assert list(new) == ["a#failed0", "a", "a", "b#failed3", "b", "c"]
    # a keeps two valid rollouts; b is left with one (no group to compare it with); c had no failure
    assert list(zero) == [True, False, False, True, True, False]


@pytest.mark.parametrize("estimator", ["bot", "grpo"])
def test_failed_rows_take_no_part_and_get_zero(estimator):
    rewards, mask, uids, failed = dense_group_batch()
    rewards[failed] = 0.0  # the sentinel G = failure_score = 0 on every token
    with use_context(BatchContext(failed=failed, dense_rewards=True)) as ctx:
        out = run_verl(estimator, rewards, mask, uids)
    adv = out.batch["advantages"]
    assert (adv[failed] == 0).all()
    keep = ~failed
    valid_uids = [u for u, k in zip(uids, keep.tolist(), strict=True) if k]
    if estimator == "bot":
        expected = bot_advantage(rewards[keep], mask[keep], valid_uids)
    else:
        expected, _ = compute_grpo_outcome_advantage(rewards[keep], mask[keep], np.array(valid_uids, dtype=object))
    torch.testing.assert_close(adv[keep], expected)
    assert ctx.metrics["verl_bot/zero_advantage_rows"] == 2.0
    assert list(out.non_tensor_batch["uid"]) == uids  # the group labels are restored


def test_a_failure_above_the_sentinel_cannot_earn_advantage():
    """The sentinel G = 0 ranks above real failures (-1): without the exclusion the failed rollout would win."""
    mask = torch.ones(3, 2)
    rewards = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [0.0, 0.0]])
    failed = torch.tensor([False, False, True])
    without = run_verl("bot", rewards, mask, ["g"] * 3)
    assert (without.batch["advantages"][2] > 0).all()  # what verl would do
    with use_context(BatchContext(failed=failed, dense_rewards=True)):
        out = run_verl("bot", rewards, mask, ["g"] * 3)
    assert (out.batch["advantages"] == 0).all()


def test_pure_failed_rows_are_zero_and_valid_rows_are_pure_over_the_valid_rows():
    rewards, mask, uids, failed = dense_group_batch(1)
    local = rewards.clamp(-1, 0)
    step_end = torch.zeros_like(mask)
    step_end[:, 1] = 1.0
    outcome = torch.zeros_like(mask)
    outcome[0, 4] = 1.0
    streams = {"local": local, "step_end": step_end, "outcome": outcome}
    with use_context(BatchContext(streams=streams, failed=failed, dense_rewards=True)):
        out = run_verl("pure", rewards, mask, uids)
    keep = ~failed
    valid_uids = [u for u, k in zip(uids, keep.tolist(), strict=True) if k]
    solved = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    expected, _ = pure_advantage(local[keep], step_end[keep], solved[keep], mask[keep], valid_uids)
    torch.testing.assert_close(out.batch["advantages"][keep], expected)
    assert (out.batch["advantages"][failed] == 0).all()


def test_old_log_probs_reach_the_context():
    rewards, mask, uids, _ = dense_group_batch()
    data = DataProto(
        batch=TensorDict(
            {"token_level_rewards": rewards, "response_mask": mask, "old_log_probs": -mask},
            batch_size=6,
        ),
        non_tensor_batch={"uid": np.array(uids, dtype=object)},
    )
    seen = {}

    def probe(**kwargs):
        seen["old"] = current().tensors["old_log_probs"]
        return kwargs["token_level_rewards"], kwargs["token_level_rewards"]

    from verl.trainer.ppo import core_algos

    core_algos.ADV_ESTIMATOR_REGISTRY["vb_test_probe"] = probe
    try:
        with use_context(BatchContext()):
            trainer_base.compute_advantage_for_multi_trajectories(
                data,
                batch_keys=[f"{u}_{i}_0" for i, u in enumerate(uids)],
                adv_estimator="vb_test_probe",
                config=compose_verl_config([]).algorithm,
            )
    finally:
        del core_algos.ADV_ESTIMATOR_REGISTRY["vb_test_probe"]
    torch.testing.assert_close(seen["old"], -mask)


def test_failed_mask_reads_scorer_failed_and_skips_padding():
    rows = [{"reward_extra_info": {"scorer_failed": 1.0}}, {"reward_extra_info": {"scorer_failed": 0.0}}, {},
            {"reward_extra_info": {"scorer_failed": 1.0}}]
    padding = torch.tensor([False, False, False, True])
    assert failed_mask(rows, padding).tolist() == [True, False, False, False]


def test_failure_rate_stops_after_patience_and_names_the_scorer():
    settings = manager_settings({})
    rows = [
        {"data_source": "react", "reward_extra_info": {"scorer_failed": 1.0, "scorer_error_msg": "TimeoutError: x"}},
        {"data_source": "react", "reward_extra_info": {"scorer_failed": 0.0, "scorer_error_msg": ""}},
    ]
    failed = torch.tensor([True, False])
    streak = []
    check_failure_rate(streak, 0.9, rows, failed, settings)
    check_failure_rate(streak, 0.2, rows, failed, settings)  # a good step resets the streak
    assert streak == []
    check_failure_rate(streak, 0.6, rows, failed, settings)
    check_failure_rate(streak, 0.7, rows, failed, settings)
    with pytest.raises(VerlBotConfigError, match=r"0.60, 0.70, 0.80 .* for 3 consecutive steps.*data_source react: "
                       r"last error: TimeoutError: x"):
        check_failure_rate(streak, 0.8, rows, failed, settings)


# ----------------------------------------------------------------------------- markers and last words
def test_first_fatal_counts_markers():
    fields = [{"reward_extra_info": {"score": 1.0}}, {"reward_extra_info": {FATAL_KEY: "no scorer for x"}}, None,
              {"reward_extra_info": {FATAL_KEY: "no scorer for y"}}]
    assert first_fatal(fields) == (2, "no scorer for x")
    assert first_fatal([{}]) == (0, None)


def test_driver_prints_the_root_cause_of_a_ray_error_last():
    from ray.exceptions import RayTaskError

    original = VerlBotConfigError("bot reward manager: no scorer for data_source='nope'\nmore")
    wrapped = RayTaskError("TaskRunner.run", "Traceback ...\nlong remote traceback", original)
    assert isinstance(driver.root_cause(wrapped), VerlBotConfigError)
    assert driver.last_line(wrapped) == (
        "verl-bot: run stopped: VerlBotConfigError: bot reward manager: no scorer for data_source='nope'"
    )
    chained = RuntimeError("outer")
    chained.__cause__ = KeyError("inner")
    assert driver.last_line(chained) == "verl-bot: run stopped: KeyError: 'inner'"


def test_local_signal_is_clipped_per_token():
    s = np.array([-3.0, -0.5, 0.0, 2.0])
    np.testing.assert_array_equal(clip_local(s, 1.0), [-1.0, -0.5, 0.0, 1.0])
    np.testing.assert_array_equal(clip_local(s, 0.0), s)


@pytest.mark.parametrize("estimator", ["grpo", "gspo", "rloo", "gae", "reco", "vps", "grail"])
def test_the_bot_manager_gives_a_scalar_estimator_one_reward_per_response_unless_told_otherwise(tmp_path, estimator):
    """Unset (`auto`), `token_level` is true only for the estimators that read dense token rewards; set to true for
    another one, it would sum G over the tokens (a reward that grows with the length): refused in one line."""
    cfg = config(tmp_path, f"algorithm.adv_estimator={estimator}", "reward.reward_manager.name=bot")
    assert manager_settings(cfg).layout == ("returns" if estimator == "gae" else "scalar")  # gae: returns from t
    for dense in ("bot", "pure", "pass"):
        cfg.algorithm.adv_estimator = dense
        assert manager_settings(cfg).per_token is True
    cfg = config(tmp_path, f"algorithm.adv_estimator={estimator}", "reward.reward_manager.name=bot",
                 "+reward.reward_kwargs.bot.token_level=true")
    with pytest.raises(VerlBotConfigError, match=f"token_level=true with adv_estimator={estimator}: the bot manager"):
        check_config(cfg)
    bad = config(tmp_path, *BOT, "+reward.reward_kwargs.bot.token_level=sometimes")
    with pytest.raises(VerlBotConfigError, match=r"^\+reward.reward_kwargs.bot.token_level='sometimes': must be true, "
                       "false, auto or returns$"):
        check_config(bad)


def test_a_local_tokenizer_without_a_chat_template_is_refused_from_its_files(tmp_path, tiny_model_dir):
    """The tokenizer's files say whether it has a chat template: its tokenizer_config.json key, or a
    chat_template.jinja / .json beside it; custom_chat_template overrides; a hub id is left to verl."""
    from verl_bot.launch.preflight import chat_template_problem

    assert chat_template_problem({"path": str(tiny_model_dir)}) is None
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    problem = chat_template_problem({"path": str(bare)})
    assert problem and "has no chat template" in problem and "custom_chat_template" in problem
    assert chat_template_problem({"path": "/nowhere", "tokenizer_path": str(bare)}) == problem
    assert chat_template_problem({"path": str(bare), "custom_chat_template": "{{ messages }}"}) is None
    assert chat_template_problem({"path": "Qwen/Qwen2.5-3B-Instruct"}) is None
    (bare / "chat_template.jinja").write_text("{{ messages }}")
    assert chat_template_problem({"path": str(bare)}) is None
    (bare / "chat_template.jinja").unlink()
    (bare / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert chat_template_problem({"path": str(bare)}) is None
    (bare / "tokenizer_config.json").write_text("{not json")
    assert chat_template_problem({"path": str(bare)}) is None  # unreadable: verl's tokenizer load says so


def test_a_reward_server_that_refuses_our_token_is_refused_at_start_up(tmp_path, monkeypatch):
    """A real math reward server with a token: no token or a wrong one is refused before anything loads, in the
    run's own one line; the right token passes (an empty batch is all the check sends)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import free_port, wait_http

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "reward_servers.math", "--port", str(port), "--workers", "1", "--token", "secret"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 120, server, poll_s=0.5)
        cfg = config(tmp_path, *BOT, f"+reward.reward_kwargs.bot.scorers.toy_lint=http://127.0.0.1:{port}")
        for token in (None, "nope"):
            if token is None:
                monkeypatch.delenv("REWARD_SERVER_TOKEN", raising=False)
            else:
                monkeypatch.setenv("REWARD_SERVER_TOKEN", token)
            with pytest.raises(VerlBotConfigError, match=r"answered HTTP 401 \(credentials refused\): set "
                                                         "REWARD_SERVER_TOKEN"):
                check_config(cfg)
        monkeypatch.setenv("REWARD_SERVER_TOKEN", "secret")
        check_config(cfg)
    finally:
        server.terminate()
        server.wait(30)


def test_the_drivers_sigterm_is_ctrl_c_unless_the_process_has_its_own_handler():
    """Python's default SIGTERM ends the driver without Ray's shutdown (its cluster trains on): a verl-bot driver
    turns it into Ctrl-C's KeyboardInterrupt; a handler the process set itself stays."""
    import subprocess
    import sys

    code = """
import os, signal, sys
from verl_bot.hooks import driver
if sys.argv[1] == "own":
    signal.signal(signal.SIGTERM, lambda *a: print("own handler", flush=True))
driver.install()
try:
    os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler before the next line
    print("no interrupt", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
"""
    outs = [subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=120).stdout
            for mode in ("default", "own")]
    assert outs[0].strip().splitlines() == ["KeyboardInterrupt"], outs[0]
    assert outs[1].strip().splitlines() == ["own handler", "no interrupt"], outs[1]
