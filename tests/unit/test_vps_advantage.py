"""GRPO-VPS estimator: hand-computed tensors, a slow loop reference, alpha = 0 is verl's GRPO, its verl adapter."""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from tests.harness.references import reference_vps
from verl_bot.advantage.vps import (
    DEFAULT_STD_FLOOR,
    PROBE_FIELD,
    VPSSettings,
    compute_vps_advantage,
    probe_tensors,
    vps_advantage,
)
from verl_bot.credit.context import BatchContext, use_context
from verl_bot.errors import VerlBotConfigError


def tensors(cuts, logp, lengths, width):
    segs = max(len(c) for c in cuts)
    starts = torch.zeros(len(cuts), segs, dtype=torch.long)
    lp = torch.zeros(len(cuts), segs)
    for i, (c, b) in enumerate(zip(cuts, logp, strict=True)):
        starts[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        lp[i, : len(b)] = torch.tensor(b)
    num = torch.tensor([len(c) for c in cuts])
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(width)] for n in lengths])
    return starts, lp, num, mask


def test_hand_computed_group_of_two():
    # row 0: 6 tokens, cuts at 0 and 3, beliefs 0.2 then 0.5, solved -> progress 0.3 and 0.5
    # row 1: 4 tokens, one segment, belief 0.4, not solved -> progress -0.4
    starts, logp, num, mask = tensors([[0, 3], [0]], [[math.log(0.2), math.log(0.5)], [math.log(0.4)]], [6, 4], 6)
    base = torch.tensor([[0.7] * 6, [-0.7] * 4 + [0.0] * 2])
    solved = torch.tensor([1.0, 0.0])

    adv, progress, _ = vps_advantage(base, mask, ["g", "g"], starts, logp, num, solved, alpha=1.0, normalize="none")
    expected = torch.tensor([[0.3] * 3 + [0.5] * 3, [-0.4] * 4 + [0.0] * 2])
    assert torch.allclose(progress, expected, atol=1e-6)
    assert torch.allclose(adv, (base + expected) * mask, atol=1e-6)

    # z-score over the group's three segments {0.3, 0.5, -0.4}: mean 0.4/3, population std sqrt(0.446667/3)
    mean, std = 0.4 / 3, math.sqrt(((0.3 - 0.4 / 3) ** 2 + (0.5 - 0.4 / 3) ** 2 + (-0.4 - 0.4 / 3) ** 2) / 3)
    z = [(x - mean) / (std + 1e-6) for x in (0.3, 0.5, -0.4)]
    assert z[0] == pytest.approx(0.43193, abs=1e-4) and z[2] == pytest.approx(-1.38218, abs=1e-4)
    adv, progress, _ = vps_advantage(base, mask, ["g", "g"], starts, logp, num, solved, alpha=0.5)
    expected = torch.tensor([[z[0]] * 3 + [z[1]] * 3, [z[2]] * 4 + [0.0] * 2])
    assert torch.allclose(progress, expected, atol=1e-5)
    assert torch.allclose(adv, (base + 0.5 * expected) * mask, atol=1e-5)


def test_log_space_floors_a_wrong_outcome():
    starts, logp, num, mask = tensors([[0, 2], [0]], [[math.log(0.2), math.log(0.5)], [math.log(0.4)]], [4, 4], 4)
    base = torch.zeros(2, 4)
    _, progress, _ = vps_advantage(
        base, mask, ["a", "b"], starts, logp, num, torch.tensor([1.0, 0.0]), space="log", normalize="none",
        log_floor=-10.0,
    )
    # row 0: log 0.5 - log 0.2 = log 2.5, then 0 - log 0.5 = log 2; row 1: floor -10 - log 0.4
    expected = [[math.log(2.5)] * 2 + [math.log(2)] * 2, [-10 - math.log(0.4)] * 4]
    assert torch.allclose(progress, torch.tensor(expected), atol=1e-5)


def test_unknown_outcome_no_probes_and_padding():
    # row 0: outcome unknown -> last segment 0; row 1: no probes (no ground truth) -> progress 0; row 2: no tokens
    starts, logp, num, mask = tensors(
        [[0, 2], [], []], [[math.log(0.25), math.log(0.75)], [], []], [5, 3, 0], 6
    )
    base = torch.tensor([[1.0] * 6, [2.0] * 6, [3.0] * 6])
    adv, progress, _ = vps_advantage(
        base, mask, ["a", "b", "c"], starts, logp, num, torch.tensor([math.nan, 1.0, 0.0]), alpha=1.0,
        normalize="none",
    )
    assert torch.allclose(progress[0], torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0]))
    assert torch.equal(adv[1], torch.tensor([2.0, 2.0, 2.0, 0.0, 0.0, 0.0]))  # GRPO's advantage, padding 0
    assert torch.equal(adv[2], torch.zeros(6))
    assert torch.isfinite(adv).all()


def test_bad_inputs_are_errors():
    starts, logp, num, mask = tensors([[0]], [[math.nan]], [3], 3)
    with pytest.raises(ValueError, match="NaN probe log-probs in 1 response"):
        vps_advantage(torch.zeros(1, 3), mask, ["u"], starts, logp, num, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="one group id"):
        vps_advantage(torch.zeros(1, 3), mask, None, starts, logp, num, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="same"):
        vps_advantage(torch.zeros(1, 4), mask, ["u"], starts, logp, num, torch.tensor([1.0]))


@st.composite
def batches(draw):
    n = draw(st.integers(1, 6))
    width = draw(st.integers(1, 12))
    lengths = [draw(st.integers(0, width)) for _ in range(n)]
    index = [draw(st.sampled_from("abc")) for _ in range(n)]
    cuts, logp, solved = [], [], []
    for length in lengths:
        inner = sorted(draw(st.sets(st.integers(1, max(length - 1, 1)), max_size=3))) if length > 1 else []
        c = [] if length == 0 or draw(st.booleans()) and draw(st.booleans()) else [0, *inner]
        cuts.append(c)
        logp.append([draw(st.floats(-30, 0)) for _ in c])
        solved.append(draw(st.sampled_from([0.0, 1.0, 0.5, None])))
    base = [[draw(st.floats(-3, 3)) for _ in range(width)] for _ in range(n)]
    return base, lengths, index, cuts, logp, solved, width


@settings(max_examples=150, deadline=None)
@given(
    batches(),
    st.floats(0, 2),
    st.sampled_from(["prob", "log"]),
    st.sampled_from(["group", "none"]),
    st.sampled_from([0.0, 0.1, 2.0]),
)
# beliefs exp(-15) and exp(-13) before a solved end: progresses 1.95e-6 apart, whose float32 z-scores were off by 0.3%
@example(([[0.0], [0.0], [0.0]], [1, 1, 1], ["a", "b", "a"], [[0], [0], [0]], [[-15.0], [0.0], [-13.0]],
          [1.0, 0.0, 1.0], 1), 0.0, "prob", "group", 0.0)
def test_matches_loop_reference(batch, alpha, space, normalize, std_floor):
    base, lengths, index, cuts, logp, solved, width = batch
    starts, lp, num, mask = tensors([c or [0] for c in cuts], [b or [0.0] for b in logp], lengths, width)
    num = torch.tensor([len(c) for c in cuts])
    s = torch.tensor([math.nan if x is None else x for x in solved])
    adv, progress, _ = vps_advantage(
        torch.tensor(base), mask, index, starts, lp, num, s, alpha=alpha, space=space, normalize=normalize,
        log_floor=-20.0, std_floor=std_floor,
    )
    ref_adv, ref_progress = reference_vps(
        base, lengths, index, cuts, logp, solved, alpha, space, normalize, std_floor=std_floor
    )
    assert torch.allclose(progress, torch.tensor(ref_progress, dtype=torch.float32), atol=1e-3, rtol=1e-4)
    assert torch.allclose(adv, torch.tensor(ref_adv, dtype=torch.float32), atol=1e-3, rtol=1e-4)
    assert torch.isfinite(adv).all()


# ------------------------------------------------------------------------------------------- the verl adapter
def _rows():
    """Two groups: u0 (3 probed rows, one solved), u1 (a row without ground truth, a too-long one, a probed one)."""
    rec = lambda cuts, logp, status="ok", **kw: {"status": status, "cuts": cuts, "logp": logp, **kw}  # noqa: E731
    info = lambda solved: {"reward_extra_info": {"solved": solved, "score": solved}}  # noqa: E731
    return [
        {PROBE_FIELD: rec([0, 2], [-2.0, -0.5], probe_tokens=40, probe_s=0.1, t0=10, t1=10.5, gen_s=1.2), **info(1.0)},
        {PROBE_FIELD: rec([0], [-1.5], probe_tokens=20, probe_s=0.05, t0=10.1, t1=10.2), **info(0.0)},
        {PROBE_FIELD: rec([0, 1, 3], [-3.0, -2.0, -2.5], probe_tokens=60, probe_s=0.2, t0=10.2, t1=11.0), **info(0.0)},
        {PROBE_FIELD: rec([], [], "no_ground_truth"), **info(0.0)},
        {PROBE_FIELD: rec([], [], "too_long", skipped=1), **info(1.0)},
        {PROBE_FIELD: rec([0], [-0.2], probe_tokens=22, probe_s=0.05, t0=10.3, t1=10.4), **info(1.0)},
    ]


def _batch():
    lengths = [5, 4, 6, 3, 6, 2]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(6)] for n in lengths])
    rewards = torch.zeros(6, 6)
    for i, (n, r) in enumerate(zip(lengths, [3.0, 0.5, 0.0, 0.0, 3.0, 3.5], strict=True)):
        rewards[i, n - 1] = r
    return rewards, mask, np.array(["u0"] * 3 + ["u1"] * 3, dtype=object)


def _verl_grpo(rewards, mask, index, norm=True):
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()},
        non_tensors={"uid": index},
    )
    return compute_advantage(data, adv_estimator="grpo", norm_adv_by_std_in_grpo=norm, config=OmegaConf.create({}))


@pytest.mark.parametrize("norm", [True, False])
def test_alpha_zero_is_exactly_verl_grpo(norm):
    rewards, mask, index = _batch()
    config = OmegaConf.create({"vps_alpha": 0.0, "norm_adv_by_std_in_grpo": norm})
    with use_context(BatchContext(rows=_rows())):
        adv, ret = compute_vps_advantage(rewards.clone(), mask, index=index, config=config)
    expected = _verl_grpo(rewards, mask, index, norm).batch["advantages"]
    assert torch.equal(adv, expected) and torch.equal(ret, expected)


def test_adapter_adds_alpha_times_progress_and_reports_cost():
    rewards, mask, index = _batch()
    rows = _rows()
    ctx = BatchContext(rows=rows)
    with use_context(ctx):
        adv, _ = compute_vps_advantage(rewards.clone(), mask, index=index, config=OmegaConf.create({"vps_alpha": 0.5}))
    grpo = _verl_grpo(rewards, mask, index).batch["advantages"]
    records = [r[PROBE_FIELD] for r in rows]
    solved = [r["reward_extra_info"]["solved"] for r in rows]
    lengths = [int(n) for n in mask.sum(1)]
    _, ref_progress = reference_vps(
        grpo.tolist(), lengths, list(index), [r["cuts"] for r in records], [r["logp"] for r in records], solved, 0.5,
        std_floor=DEFAULT_STD_FLOOR,
    )
    assert torch.allclose(adv, grpo + 0.5 * torch.tensor(ref_progress), atol=1e-5)
    assert torch.equal(adv[3], grpo[3]) and torch.equal(adv[4], grpo[4])  # no probes: GRPO's advantage
    m = ctx.metrics
    assert m["vps/probe_tokens_per_rollout"] == pytest.approx(142 / 6)
    assert m["vps/probes_per_rollout"] == pytest.approx(7 / 6)
    assert m["vps/probe_time_s"] == pytest.approx(1.0)  # first probe start 10.0 to last end 11.0
    assert m["vps/probe_s_per_rollout"] == pytest.approx(0.4 / 6) and m["vps/gen_s_per_rollout"] == pytest.approx(0.2)
    assert m["vps/no_ground_truth_rows"] == 1 and m["vps/skipped_long_probes"] == 1 and m["vps/probed_rows"] == 4
    assert m["vps/probe_failed_rows"] == 0 and m["vps/no_outcome_rows"] == 0 and m["vps/progress_abs_mean"] > 0


def test_adapter_refuses_missing_probes_and_a_batch_whose_probes_all_failed():
    rewards, mask, index = _batch()
    rows = _rows()
    rows[2] = {"reward_extra_info": {"solved": 0.0}}
    with use_context(BatchContext(rows=rows)), pytest.raises(VerlBotConfigError, match="default_agent_loop=vps"):
        compute_vps_advantage(rewards, mask, index=index, config=None)
    failed = {PROBE_FIELD: {"status": "probe_failed", "cuts": [], "logp": [], "error": "KeyError: boom"}}
    rows = [failed] * 5 + [{PROBE_FIELD: {"status": "no_ground_truth", "cuts": [], "logp": []}}]
    with use_context(BatchContext(rows=rows)), pytest.raises(VerlBotConfigError, match="Last error: KeyError: boom"):
        compute_vps_advantage(rewards, mask, index=index, config=None)
    rows = _rows()
    rows[0] = failed  # one failure among good rows: GRPO for that row, flagged
    ctx = BatchContext(rows=rows)
    with use_context(ctx):
        adv, _ = compute_vps_advantage(rewards.clone(), mask, index=index, config=None)
    assert ctx.metrics["vps/probe_failed_rows"] == 1
    assert torch.equal(adv[0], _verl_grpo(rewards, mask, index).batch["advantages"][0])
    with pytest.raises(VerlBotConfigError, match="batch context"):
        compute_vps_advantage(rewards, mask, index=index, config=None)


def test_probe_tensors_pad_and_check():
    starts, logp, num, solved, _ = probe_tensors(_rows())
    assert starts.shape == (6, 3) and num.tolist() == [2, 1, 3, 0, 0, 1]
    assert starts[2].tolist() == [0, 1, 3] and logp[0, :2].tolist() == [-2.0, -0.5]
    assert solved.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="2 cuts but 1"):
        probe_tensors([{PROBE_FIELD: {"cuts": [0, 1], "logp": [-1.0]}}])


def test_settings_defaults_and_validation():
    s = VPSSettings.from_config(None)
    assert (s.alpha, s.cut_quantile, s.max_cuts, s.min_gap, s.space, s.template) == (0.5, 0.1, 8, 64, "prob", "auto")
    assert VPSSettings.from_config(OmegaConf.create({"vps_min_gap": "4", "vps_template": "A: {answer}"})).min_gap == 4
    for key, bad in [("vps_alpha", -1), ("vps_space", "odds"), ("vps_template", "no slot"), ("vps_cut_quantile", 0),
                     ("vps_min_gap", 0), ("vps_cut_rule", "entropy"), ("vps_normalize", "batch"), ("vps_alpha", "x"),
                     ("vps_max_cuts", 2.5), ("vps_min_gap", True)]:
        with pytest.raises(VerlBotConfigError, match=f"\\+algorithm.{key}"):
            VPSSettings.from_config({key: bad})
    with pytest.raises(VerlBotConfigError, match=r"^unknown \+algorithm.vps_alhpa: the GRPO-VPS knobs are vps_alpha, "):
        VPSSettings.from_config({"vps_alhpa": 0.5})


def test_start_up_checks_refuse_vps_without_its_agent_loop_answers_or_with_a_bad_knob(tmp_path):
    import pandas as pd

    from tests.conftest import compose_verl_config
    from verl_bot.launch.preflight import check_config

    def parquet(name, truths):
        rows = [{"data_source": "x", "prompt": [], "reward_model": {"ground_truth": gt}} for gt in truths]
        pd.DataFrame(rows).to_parquet(tmp_path / name)
        return f"data.train_files={tmp_path / name}"

    base = ["algorithm.adv_estimator=vps", parquet("answers.parquet", [None, "42", ""])]
    with pytest.raises(VerlBotConfigError, match="default_agent_loop=single_turn_agent; set it to vps_single_turn"):
        check_config(compose_verl_config(base))
    loop = "actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn"
    check_config(compose_verl_config([*base, loop]))
    with pytest.raises(VerlBotConfigError, match="vps_space='odds': must be one of prob, log"):
        check_config(compose_verl_config([*base, loop, "+algorithm.vps_space=odds"]))
    for name, truths in [("lint.parquet", [{"forbidden": "aeiou"}, None]), ("empty.parquet", ["", None, "  "])]:
        with pytest.raises(VerlBotConfigError, match=f"no row of .*{name} has one"):  # toy_lint's: no answers
            check_config(compose_verl_config([base[0], parquet(name, truths), loop]))


def test_the_std_floor_keeps_an_all_unsolved_group_of_tiny_beliefs_near_grpo():
    # the group: beliefs 1e-4 .. 2e-4 probed at three cuts of two unsolved rollouts (GRPO gives 0)
    beliefs = [[1e-4, 2e-4, 1.5e-4], [1e-4, 5e-5, 1e-4]]
    logps = [[math.log(b) for b in row] for row in beliefs]
    starts, logp, num, mask = tensors([[0, 2, 4], [0, 2, 4]], logps, [6, 6], 6)
    base, solved = torch.zeros(2, 6), torch.zeros(2)
    _, raw, raw_share = vps_advantage(base, mask, ["g", "g"], starts, logp, num, solved, std_floor=0.0)
    # unfloored: the progress of 1e-4 is stretched to unit variance, +-0.75 of advantage at alpha 0.5
    assert raw[0, ::2].tolist() == pytest.approx([1.55, -0.19, -1.36], abs=0.01)
    assert raw[1, ::2].tolist() == pytest.approx([-0.19, 0.97, -0.78], abs=0.01)
    assert raw_share == 0.0
    adv, floored, share = vps_advantage(base, mask, ["g", "g"], starts, logp, num, solved)
    # floored: (D - mean) / (0.1 + eps), D = the belief changes (the last one to solved = 0)
    d = [[1e-4, -0.5e-4, -1.5e-4], [-0.5e-4, 0.5e-4, -1e-4]]
    mean = sum(map(sum, d)) / 6
    expected = [[(x - mean) / (DEFAULT_STD_FLOOR + 1e-6) for x in row for _ in range(2)] for row in d]
    torch.testing.assert_close(floored, torch.tensor(expected), rtol=1e-4, atol=1e-8)
    assert float(adv.abs().max()) < 2e-3 and share == 1.0  # against +-0.75 unfloored


def test_the_adapter_reports_the_floors_share_and_the_knob_is_checked():
    rewards, mask, index = _batch()
    ctx = BatchContext(rows=_rows())
    with use_context(ctx):
        compute_vps_advantage(rewards.clone(), mask, index=index, config=OmegaConf.create({"vps_std_floor": 5.0}))
    assert ctx.metrics["vps/floor_share"] == 1.0  # both groups' progress std is below 5
    with use_context(ctx):
        compute_vps_advantage(rewards.clone(), mask, index=index, config=OmegaConf.create({"vps_std_floor": 0.0}))
    assert ctx.metrics["vps/floor_share"] == 0.0
    assert VPSSettings.from_config(None).std_floor == DEFAULT_STD_FLOOR
    with pytest.raises(VerlBotConfigError, match=r"\+algorithm.vps_std_floor=-1: must be a finite number >= 0"):
        VPSSettings.from_config({"vps_std_floor": -1})


def test_two_progresses_one_float32_step_apart_get_symmetric_z_scores():
    """Beliefs 1 and 1 - 2^-24 (logp 0 and -5.96e-8), both unsolved, no floor: progresses -1 and -(1 - 2^-24).
    Their mean in float32 rounds onto one of them; in float64 the z-scores are +-d / (d + eps), d = 2^-25."""
    starts, logp, num, mask = tensors([[0], [0]], [[0.0], [-5.960464477539063e-08]], [1, 1], 1)
    _, progress, _ = vps_advantage(torch.zeros(2, 1), mask, ["a", "a"], starts, logp, num, torch.zeros(2),
                                   alpha=0.0, std_floor=0.0)
    d = 2.0**-25
    z = d / (d + 1e-6)
    assert progress[:, 0].tolist() == pytest.approx([-z, z], rel=1e-3)
