"""PASS (Chunk-by-Value, Divide-Length, Advantage Fusion): hand-computed tensors, a slow loop reference, the
reductions it must satisfy, bad input, its verl adapter and its start-up check."""

import math
import statistics

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from tests.conftest import compose_verl_config
from tests.harness.advantage_step import dense_group_batch, run_verl
from tests.harness.references import reference_pass
from verl_bot.advantage.pass_ import (
    DEFAULT_STD_FLOOR,
    PassSettings,
    compute_pass_advantage,
    pass_advantage,
    pass_metrics,
    pass_settings,
    value_chunks,
    value_density,
)
from verl_bot.credit.context import BatchContext, use_context
from verl_bot.credit.streams import StreamsUnavailable, use_streams
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch.preflight import check_config

SQRT = math.sqrt


def right_padded(rows, width=None):
    """(B, T) float64 signal and mask from lists of per-row values (right-padded with 0)."""
    width = width or max(len(r) for r in rows)
    signal = torch.tensor([list(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
    return signal, mask


# ------------------------------------------------------------------------------ the three operations, by hand
def test_chunk_by_value_by_hand():
    signal, mask = right_padded([[0, 0, -1, -1, 0, 0.5, 0.5, 0], [0.3, -1, -1, 0, 0.2, 0.2, 0.2, -1], [-2, -2]])
    ids, chunks = value_chunks(signal, mask)
    assert ids[0].tolist() == [1, 1, 2, 2, 3, 4, 4, 5]  # sign runs 0 0 | - - | 0 | + + | 0
    assert chunks.tolist() == [5, 5, 1]
    assert ids[2].tolist()[:2] == [1, 1]

    ids, _ = value_chunks(signal, mask, dead_zone=0.6)  # |0.5| < 0.6 counts as 0
    assert ids[0].tolist() == [1, 1, 2, 2, 3, 3, 3, 3]

    # min_chunk 2, row 1: runs + | - - | 0 | + + + | -: the short first run joins the first long run,
    # the other short runs join the chunk before them
    ids, chunks = value_chunks(signal, mask, min_chunk=2)
    assert ids[1].tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert ids[0].tolist() == [1, 1, 2, 2, 2, 3, 3, 3]  # 0 0 | - - 0 | + + 0
    ids, chunks = value_chunks(signal, mask, min_chunk=9)  # no run is long enough: one chunk per rollout
    assert chunks.tolist() == [1, 1, 1] and ids.max() == 1

    # masked tokens inside a response (a tool output) are skipped: the runs around them continue
    holes = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 1]])
    ids, chunks = value_chunks(torch.tensor([[-1.0, 5.0, -1.0, 0.0], [3.0, 1.0, -1.0, 0.0]]), holes)
    assert ids[0].tolist() == [1, 1, 1, 2] and ids[1].tolist() == [0, 1, 1, 2] and chunks.tolist() == [2, 2]


def test_divide_length_by_hand():
    # chunks [-1, -1] (c = -1), [0, 0, 0] (c = 0), [0.5] (c = 0.5); L = 6; then one padding token
    signal, mask = right_padded([[-1, -1, 0, 0, 0, 0.5]], width=7)
    ids, _ = value_chunks(signal, mask)
    total = -1 - 1 + 0.5
    expected = {
        "sequence": [total / 6] * 6,
        "chunk": [-1, -1, 0, 0, 0, 0.5],
        "suffix": [total / 6, total / 6, 0.5 / 4, 0.5 / 4, 0.5 / 4, 0.5 / 1],  # chunk's return-to-go / tokens left
    }
    for density, values in expected.items():
        got = value_density(signal, mask, ids, density)
        torch.testing.assert_close(got, torch.tensor([values + [0.0]], dtype=torch.float64), msg=density)


def test_advantage_fusion_by_hand():
    # row 0: process [-1, -1, 0, 0], unsolved, format +0.2; row 1: process [0, 0], solved, format -1
    process, mask = right_padded([[-1, -1, 0, 0], [0, 0]])
    out = pass_advantage(
        process, torch.tensor([0.0, 1.0]), torch.tensor([0.2, -1.0]), mask, ["g", "g"], PassSettings(format_coef=0.5)
    )
    eps = 1e-6
    z_out = 0.5 / (SQRT(0.5) + eps)  # outcome [0, 1]: mean 0.5, unbiased std sqrt(0.5)
    z_fmt = 0.6 / (SQRT(0.72) + eps)  # format [0.2, -1]: mean -0.4, unbiased std sqrt(0.72)
    # suffix densities: row 0 chunks [-1, -1] | [0, 0] -> [-2/4, -2/4, 0, 0]; row 1 one chunk -> [0, 0]
    mu = 0.5 * (0.25 * (-1.0) + 0.5 * 0.0)  # BoT: 1/L-weighted mean over the group's tokens = -0.125
    var = 0.5 * (0.25 * (2 * 0.375**2 + 2 * 0.125**2) + 0.5 * (2 * 0.125**2))
    lo, hi = (-0.5 - mu) / (SQRT(var) + eps), (0.0 - mu) / (SQRT(var) + eps)
    torch.testing.assert_close(out.outcome, torch.tensor([-z_out, z_out]))
    torch.testing.assert_close(out.format, torch.tensor([0.5 * z_fmt, -0.5 * z_fmt]))
    torch.testing.assert_close(out.process, torch.tensor([[lo, lo, hi, hi], [hi, hi, 0, 0]]))
    row0, row1 = -z_out + 0.5 * z_fmt, z_out - 0.5 * z_fmt
    torch.testing.assert_close(
        out.advantages, torch.tensor([[row0 + lo, row0 + lo, row0 + hi, row0 + hi], [row1 + hi, row1 + hi, 0, 0]])
    )
    assert out.chunks.tolist() == [2, 1]
    assert lo == pytest.approx(-SQRT(3), rel=1e-5) and hi == pytest.approx(1 / SQRT(3), rel=1e-5)


# ------------------------------------------------------------------------------ the slow loop reference
VALUES = [-1.0, -0.5, -0.1, 0.0, 0.0, 0.1, 0.5, 1.0]


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_matches_loop_reference(data):
    batch = data.draw(st.integers(1, 6))
    width = data.draw(st.integers(1, 8))
    process = [[data.draw(st.sampled_from(VALUES)) for _ in range(width)] for _ in range(batch)]
    if data.draw(st.booleans()):  # right-padded rows (verl's single-turn responses), empty ones included
        lengths = [data.draw(st.integers(0, width)) for _ in range(batch)]
        mask = [[int(t < n) for t in range(width)] for n in lengths]
    else:  # masked tokens inside rows (multi-turn tool outputs)
        mask = [[data.draw(st.integers(0, 1)) for _ in range(width)] for _ in range(batch)]
    outcome = [float(data.draw(st.integers(0, 1))) for _ in range(batch)]
    fmt = [data.draw(st.sampled_from([-1.0, 0.0, 0.2])) for _ in range(batch)]
    index = [data.draw(st.sampled_from("abc")) for _ in range(batch)]
    knobs = PassSettings(
        format_coef=data.draw(st.sampled_from([0.0, 0.5, 1.0])),
        process_coef=data.draw(st.sampled_from([0.5, 1.0, 2.0])),
        dead_zone=data.draw(st.sampled_from([0.0, 0.2])),
        min_chunk=data.draw(st.integers(1, 4)),
        density=data.draw(st.sampled_from(["suffix", "sequence", "chunk"])),
        op=data.draw(st.sampled_from(["grpo", "drgrpo"])),
        std_floor=data.draw(st.sampled_from([0.0, 0.01, 0.3])),
    )
    expected = reference_pass(process, mask, outcome, fmt, index, knobs)
    out = pass_advantage(
        torch.tensor(process, dtype=torch.float64),
        torch.tensor(outcome),
        torch.tensor(fmt),
        torch.tensor(mask),
        index,
        knobs,
    )
    torch.testing.assert_close(out.advantages, torch.tensor(expected, dtype=torch.float32), atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------ reductions
@pytest.mark.parametrize("op", ["grpo", "drgrpo"])
def test_only_an_outcome_stream_is_verls_grpo(op):
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 9, (11,), generator=gen)
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()
    solved = torch.randint(0, 2, (11,), generator=gen).float()
    index = np.array(list("aaaabbbbccd"), dtype=object)  # c: 2 rollouts, d: one (verl keeps its raw score)
    rewards = torch.zeros(11, 8)
    rewards[torch.arange(11), lengths - 1] = solved
    expected, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=op == "grpo")

    zeros = pass_advantage(torch.zeros(11, 8), solved, torch.zeros(11), mask, index, PassSettings(op=op))
    torch.testing.assert_close(zeros.advantages, expected)
    noisy = torch.randn(11, 8, generator=gen)  # other streams present but weighted 0
    off = PassSettings(op=op, format_coef=0.0, process_coef=0.0)
    torch.testing.assert_close(pass_advantage(noisy, solved, noisy[:, 0], mask, index, off).advantages, expected)
    assert (expected != 0).any()


@settings(max_examples=40, deadline=None)
@given(data=st.data(), density=st.sampled_from(["suffix", "sequence", "chunk"]))
def test_one_chunk_per_rollout_gets_the_density_of_the_whole_rollout(data, density):
    rows = []
    for _ in range(data.draw(st.integers(1, 4))):
        sign = data.draw(st.sampled_from([-1.0, 0.0, 1.0]))
        size = data.draw(st.integers(1, 6))
        rows.append([sign * data.draw(st.floats(0.1, 3.0)) for _ in range(size)])  # one sign: one chunk
    signal, mask = right_padded(rows, width=7)
    whole = torch.tensor([sum(r) / len(r) for r in rows], dtype=torch.float64)[:, None] * mask
    ids, chunks = value_chunks(signal, mask)
    assert chunks.tolist() == [1] * len(rows)
    torch.testing.assert_close(value_density(signal, mask, ids, density), whole)
    # any signal, with min_chunk longer than every rollout: one chunk each, same density
    mixed = signal * torch.tensor([(-1.0) ** t for t in range(7)], dtype=torch.float64)
    ids, _ = value_chunks(mixed, mask, min_chunk=8)
    expected = (mixed * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True) * mask
    torch.testing.assert_close(value_density(mixed, mask, ids, density), expected)


def test_equal_rollouts_keep_only_their_within_rollout_signal_and_padding_stays_zero():
    process, mask = right_padded([[-1, 0.5, 0.5]] * 3, width=5)
    out = pass_advantage(process, torch.ones(3), torch.full((3,), 0.2), mask, ["g"] * 3)
    assert torch.equal(out.outcome, torch.zeros(3)) and torch.equal(out.format, torch.zeros(3))
    assert torch.equal(out.advantages[1:], out.advantages[:2]) and torch.equal(out.advantages[:, 3:], torch.zeros(3, 2))
    assert out.advantages[0, 0] < 0 < out.advantages[0, 1]  # the token-level operator keeps the chunks apart
    sequence = PassSettings(density="sequence")  # one density per rollout: identical rollouts get exactly 0
    flat = pass_advantage(process, torch.ones(3), torch.full((3,), 0.2), mask, ["g"] * 3, sequence)
    assert torch.equal(flat.advantages, torch.zeros(3, 5))


# ------------------------------------------------------------------------------ bad input, knobs
def test_bad_input_is_a_clear_error_naming_the_uid():
    process, mask = right_padded([[math.nan, 0.0], [0.0, 0.0]])
    ok = torch.tensor([1.0, 0.0])
    with pytest.raises(ValueError, match=r"non-finite process signal \(local\).*uid-x"):
        pass_advantage(process, ok, ok, mask, ["uid-x", "uid-y"])
    process = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="no verifiable outcome.*uid-y"):
        pass_advantage(process, torch.tensor([1.0, math.nan]), ok, mask, ["uid-x", "uid-y"])
    with pytest.raises(ValueError, match="non-finite format score.*uid-x"):
        pass_advantage(process, ok, torch.tensor([math.inf, 0.0]), mask, ["uid-x", "uid-y"])
    with pytest.raises(ValueError, match="one group id"):
        pass_advantage(process, ok, ok, mask, None)
    with pytest.raises(ValueError, match="same"):
        pass_advantage(process[:, :1], ok, ok, mask, ["a", "a"])


def test_knobs_are_parsed_and_checked():
    assert pass_settings({}) == PassSettings()
    assert pass_settings({"norm_adv_by_std_in_grpo": False}).op == "drgrpo"
    got = pass_settings({"pass_min_chunk": "3", "pass_density": "chunk", "pass_format_coef": 0.25, "pass_op": "grpo"})
    assert got == PassSettings(min_chunk=3, density="chunk", format_coef=0.25)
    for bad, message in [
        ({"pass_density": "bogus"}, r"^\+algorithm.pass_density='bogus': must be one of suffix, sequence, chunk$"),
        ({"pass_op": "ppo"}, r"^\+algorithm.pass_op='ppo': must be one of grpo, drgrpo$"),
        ({"pass_min_chunk": 1.5}, r"^\+algorithm.pass_min_chunk=1.5: must be an integer >= 1$"),
        ({"pass_min_chunk": 0}, r"^\+algorithm.pass_min_chunk=0: must be an integer >= 1$"),
        ({"pass_dead_zone": -0.1}, r"^\+algorithm.pass_dead_zone=-0.1: must be a finite number >= 0$"),
        ({"pass_process_coef": "x"}, r"^\+algorithm.pass_process_coef='x': must be a finite number$"),
        ({"pass_densty": "chunk"}, r"^unknown \+algorithm.pass_densty: the PASS knobs are pass_format_coef, "),
    ]:
        with pytest.raises(VerlBotConfigError, match=message):
            pass_settings(bad)


def test_a_bad_knob_stops_the_run_before_it_starts():
    base = ["algorithm.adv_estimator=pass", "reward.reward_manager.name=bot", "algorithm.use_kl_in_reward=false"]
    check_config(compose_verl_config([*base, "+algorithm.pass_density=chunk"]))
    with pytest.raises(VerlBotConfigError, match=r"^\+algorithm.pass_density='bogus': must be one of"):
        check_config(compose_verl_config([*base, "+algorithm.pass_density=bogus"]))


def test_failed_rows_are_zero_and_valid_rows_are_pass_over_the_valid_rows():
    """Through verl's trainer_base function: a row whose scorer failed takes no part in its group."""
    rewards, mask, uids, failed = dense_group_batch(2)
    local = rewards.clamp(-1, 0)
    last = mask.sum(dim=1).long() - 1
    outcome, fmt = torch.zeros_like(mask), torch.zeros_like(mask)
    outcome[torch.arange(6), last] = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    fmt[torch.arange(6), last] = torch.tensor([0.2, -1.0, -1.0, 0.2, 0.2, -1.0])
    streams = {"local": local, "outcome": outcome, "format": fmt}
    with use_context(BatchContext(streams=streams, failed=failed, dense_rewards=True)):
        out = run_verl("pass", rewards, mask, uids)
    keep = ~failed
    valid_uids = [u for u, k in zip(uids, keep.tolist(), strict=True) if k]
    at_last = torch.arange(6)[keep], last[keep]
    expected = pass_advantage(local[keep], outcome[at_last], fmt[at_last], mask[keep], valid_uids)
    torch.testing.assert_close(out.batch["advantages"][keep], expected.advantages)
    assert (out.batch["advantages"][failed] == 0).all()


# ------------------------------------------------------------------------------ verl adapter
def test_adapter_reads_the_streams_and_knobs_and_reports_metrics():
    process, mask = right_padded([[-1, -1, 0, 0], [0, 0]])
    mask = mask.float()
    outcome = torch.tensor([[0, 0, 0, 0.0], [0, 1.0, 0, 0]])  # on each row's last valid token
    fmt = torch.tensor([[0, 0, 0, 0.2], [0, -1.0, 0, 0]])
    index = np.array(["g", "g"], dtype=object)
    streams = {"local": process.float(), "outcome": outcome, "format": fmt}
    with pytest.raises(StreamsUnavailable, match="reward.reward_manager.name=bot"):
        compute_pass_advantage(torch.zeros(2, 4), mask, index, {})
    with use_streams({"local": process.float(), "outcome": outcome}), pytest.raises(StreamsUnavailable):
        compute_pass_advantage(torch.zeros(2, 4), mask, index, {})  # no format stream
    with use_context(BatchContext(streams=streams)) as ctx:
        adv, ret = compute_pass_advantage(torch.zeros(2, 4), mask, index, {"pass_density": "chunk"})
    expected = pass_advantage(
        process.float(), torch.tensor([0.0, 1.0]), torch.tensor([0.2, -1.0]), mask, index, PassSettings(density="chunk")
    )
    torch.testing.assert_close(adv, expected.advantages)
    assert ret is adv
    assert ctx.metrics["pass/chunks_per_rollout"] == 1.5 and ctx.metrics["pass/tokens_per_chunk"] == 2.0
    shares = [ctx.metrics[f"pass/share_{name}"] for name in ("outcome", "format", "process")]
    assert sum(shares) == pytest.approx(1.0) and all(s > 0 for s in shares)
    lengths = torch.tensor([4.0, 2.0])  # a rollout's z of the outcome / format is on each of its L_i tokens
    outcome_part = (expected.outcome.abs() * lengths).sum()
    whole = outcome_part + (expected.format.abs() * lengths).sum() + expected.process.abs().sum()
    assert shares[0] == pytest.approx(float(outcome_part / whole), rel=1e-5)


# ------------------------------------------------------------------------------ ties, the floor, multi-turn
@pytest.mark.parametrize("k", [8, 16])
def test_tied_outcome_and_format_streams_are_exactly_zero(k):
    # k equal format scores of +0.2 and equal outcomes: verl's float32 group_mean_std leaves a mean 1.5e-8 off
    # and a std of 1e-8, i.e. -0.0147 on every token; ties must give exactly 0
    out = pass_advantage(torch.zeros(k, 5), torch.ones(k), torch.full((k,), 0.2), torch.ones(k, 5), ["g"] * k)
    assert torch.equal(out.outcome, torch.zeros(k)) and torch.equal(out.format, torch.zeros(k))
    assert torch.equal(out.advantages, torch.zeros(k, 5))
    assert out.tied.tolist() == [True]
    # one different format score: its group is not tied, and the z-scores are verl's GRPO's
    fmt = torch.full((k,), 0.2)
    fmt[0] = -1.0
    out = pass_advantage(torch.zeros(k, 5), torch.ones(k), fmt, torch.ones(k, 5), ["g"] * k)
    mean, std = (0.2 * (k - 1) - 1.0) / k, statistics.stdev(fmt.tolist())
    torch.testing.assert_close(out.format, ((fmt.double() - mean) / (std + 1e-6)).float())
    assert out.tied.tolist() == [False]


def test_process_floor_bounds_a_tied_group_of_long_rollouts():
    # the case: 8 rollouts x 4096 tokens, equal outcomes, one 10-token ESLint warning S = -0.02 in one
    process = torch.zeros(8, 4096)
    process[0, 2000:2010] = -0.02
    mask, index = torch.ones(8, 4096), ["g"] * 8
    raw = pass_advantage(process, torch.ones(8), torch.zeros(8), mask, index, PassSettings(std_floor=0.0))
    assert raw.process[0, 0] == pytest.approx(-3.58, abs=0.01)  # on the 2000 tokens before the warning
    assert raw.process[0, 2000] == pytest.approx(-7.22, abs=0.01)  # on the warning's chunk
    # floored: (D - mu) / (floor + eps), D the suffix density; it scales with the penalty
    floor = 0.01
    out = pass_advantage(process, torch.ones(8), torch.zeros(8), mask, index, PassSettings(std_floor=floor))
    density = torch.zeros(8, 4096, dtype=torch.float64)
    density[0, :2000] = -0.2 / 4096  # the first chunk's suffix: the whole row
    density[0, 2000:2010] = -0.2 / 2096  # the warning's chunk to the end
    mu = float(density.sum()) / (8 * 4096)
    expected = torch.where(mask.bool(), (density - mu) / (floor + 1e-6), 0.0)
    torch.testing.assert_close(out.process, expected.float(), rtol=1e-4, atol=1e-8)
    smaller = process / 200
    tiny = pass_advantage(smaller, torch.ones(8), torch.zeros(8), mask, index, PassSettings(std_floor=floor))
    torch.testing.assert_close(tiny.process * 200, out.process, rtol=1e-3, atol=1e-7)
    metrics = pass_metrics(out, mask, floor)
    assert metrics["pass/tied_group_share"] == 1.0 and metrics["pass/floor_share"] == 1.0
    assert metrics["pass/adv_abs_max"] == pytest.approx(float(out.advantages.abs().max()))
    assert pass_metrics(raw, mask, 0.0)["pass/floor_share"] == 0.0


def test_metrics_count_tied_and_floored_groups_by_hand():
    # group a: outcomes differ (not tied), large process std; group b: all solved, a small penalty (tied, floored);
    # group c: one rollout (not counted)
    process, mask = right_padded([[-1, 0, 0, 0], [0, 0, 0, 0], [-0.001, 0, 0, 0], [0, 0, 0, 0], [0, 0]])
    outcome = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0])
    out = pass_advantage(process, outcome, torch.zeros(5), mask, list("aabbc"), PassSettings(std_floor=0.05))
    metrics = pass_metrics(out, mask, 0.05)
    assert metrics["pass/tied_group_share"] == 0.5 and metrics["pass/floor_share"] == 0.5
    low, high = float(out.advantages.min()), float(out.advantages.max())
    assert metrics["pass/adv_abs_max"] == max(-low, high) > 0


def test_outcome_and_format_are_read_where_the_manager_wrote_them_in_a_multi_turn_rollout():
    # row 0 ends in a tool observation (masked): the manager wrote outcome and format on its last response token
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    outcome = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    fmt = torch.tensor([[0.0, 0.0, 0.0, 0.2], [0.0, 0.0, -1.0, 0.0]])
    streams = {"local": torch.zeros(2, 4), "outcome": outcome, "format": fmt}
    index = np.array(["g", "g"], dtype=object)
    with use_context(BatchContext(streams=streams)):
        adv, _ = compute_pass_advantage(torch.zeros(2, 4), mask, index, {})
    expected = pass_advantage(torch.zeros(2, 4), torch.tensor([1.0, 0.0]), torch.tensor([0.2, -1.0]), mask, index)
    torch.testing.assert_close(adv, expected.advantages)
    assert adv[0, 0] > 0 > adv[1, 0]  # solved and well formatted: read, not the 0 of its last valid token


def test_the_floor_knob_is_parsed_and_checked():
    assert pass_settings({"pass_std_floor": "0.2"}).std_floor == 0.2
    assert PassSettings().std_floor == DEFAULT_STD_FLOOR
    with pytest.raises(VerlBotConfigError, match=r"\+algorithm.pass_std_floor=-1: must be a finite number >= 0"):
        pass_settings({"pass_std_floor": -1})
