"""Multi-output agent loops: a sample's outputs (`{uid}_{session}_{j}`) are one rollout of `bot`, each output gets
its own token rewards, and verl-bot's other estimators refuse such batches with one line.

Unit checks: session-aware `bot` against the joined rows (split invariance) and hand-computed values, the
manager's lengths and per-trajectory rewards on verl's `pad_sequence` reward batch, the fingerprint pick of
`AgentLoopOutput.as_dict`, the failure exclusion by session. End to end: `tests/fixtures/two_turn_loop.py`
(two outputs per sample) through verl's real trainer, one start.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto

from tests.fixtures.two_turn_loop import toy_lint_sessions
from tests.harness.manager import token_local
from tests.harness.references import reference_bot
from tests.harness.trainer import Run
from verl_bot.advantage.bot import bot_advantage, bot_advantage_and_stats, bot_diagnostics
from verl_bot.credit.sessions import fingerprint, session_reward_score
from verl_bot.credit.spans import token_char_spans
from verl_bot.credit.verdict import InvalidVerdict, validate_verdict
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.rewards.manager import BoTRewardManager
from verl_bot.training.failures import exclusion_uids, last_outputs, refuse_multi_output, session_keys
from verl_bot.training.rows import dense_fields

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------ session-aware bot
def joined_reference(rewards, mask, uids, sessions, **options):
    """Slow reference: join each session's valid tokens into one row, run BoT's slow reference (`reference_bot`),
    split back."""
    names = list(dict.fromkeys(sessions))
    rows = {s: [i for i in range(len(sessions)) if sessions[i] == s] for s in names}
    joined = [torch.cat([rewards[i][mask[i] != 0] for i in rows[s]]) for s in names]
    width = max(len(j) for j in joined)
    jr = torch.zeros(len(names), width, dtype=rewards.dtype)
    jm = torch.zeros(len(names), width)
    for k, values in enumerate(joined):
        jr[k, : len(values)], jm[k, : len(values)] = values, 1
    adv = reference_bot(jr, jm, [uids[rows[s][0]] for s in names], **options)
    out = torch.zeros_like(rewards, dtype=adv.dtype)
    for k, s in enumerate(names):
        at = 0
        for i in rows[s]:
            n = int((mask[i] != 0).sum())
            out[i, mask[i] != 0] = adv[k, at : at + n]
            at += n
    return out


def random_sessions(seed: int, groups: int = 3, n: int = 4, outputs: int = 3, width: int = 9):
    """Rewards (B, width), an int64 right-padded mask, uids and sessions: each session 1..outputs rows."""
    gen = torch.Generator().manual_seed(seed)
    uids, sessions = [], []
    for g in range(groups):
        for k in range(n):
            for _ in range(int(torch.randint(1, outputs + 1, (1,), generator=gen))):
                uids.append(f"u{g}")
                sessions.append(f"u{g}_{k}")
    lengths = torch.randint(1, width + 1, (len(uids),), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    rewards = (torch.randn(len(uids), width, generator=gen) + 3.0) * mask
    order = torch.randperm(len(uids), generator=gen)  # sessions' rows need not be adjacent
    return rewards[order], mask[order], [uids[i] for i in order], [sessions[i] for i in order]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("options", [{}, {"length_weighting": False}, {"norm_by_std": False}, {"std_floor": 0.5}])
def test_session_bot_equals_the_joined_rows(seed, options):
    rewards, mask, uids, sessions = random_sessions(seed)
    got = bot_advantage(rewards, mask, uids, sessions=sessions, **options)
    want = joined_reference(rewards.double(), mask, uids, sessions, **options)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)


def test_session_bot_by_hand():
    """Group of K=2 sessions: A = rows (1,1) and (3) [one session, L=3]; B = row (2). Weights 1/(K L_k):
    mu = (1/2)(5/3) + (1/2)(2) = 11/6; var = (1/2)(1/3)[2 (1-11/6)^2 + (3-11/6)^2] + (1/2)(2-11/6)^2
    = (1/6)(99/36) + 1/72 = 17/36."""
    rewards = torch.tensor([[1.0, 1.0], [3.0, 0.0], [2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    adv, stats = bot_advantage_and_stats(rewards, mask, ["g"] * 3, epsilon=0.0, sessions=["A", "A", "B"])
    mu, std = 11 / 6, (17 / 36) ** 0.5
    want = torch.tensor([[1 - mu, 1 - mu], [3 - mu, 0.0], [2 - mu, 0.0]]) / std
    torch.testing.assert_close(adv, want.float())
    assert float(stats.rollouts[0]) == 2.0  # sessions, not rows
    assert bot_diagnostics(stats)["rollouts_per_group"] == 2.0
    rows_only = bot_advantage(rewards, mask, ["g"] * 3, epsilon=0.0)  # rows as rollouts: another bag
    assert not torch.allclose(rows_only, adv)


def test_session_bot_keeps_exact_zeros_and_large_offsets():
    """All-equal rewards across a session's rows give exactly 0; a large common offset changes nothing
    (the re-based shifted sums, and the direct recomputation where they cancel)."""
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    flat = torch.full((3, 3), 7.25) * mask
    assert bool((bot_advantage(flat, mask, ["g"] * 3, sessions=["a", "a", "b"]) == 0).all())
    rewards, mask, uids, sessions = random_sessions(9)
    base = bot_advantage(rewards.double(), mask, uids, sessions=sessions)
    shifted = bot_advantage(rewards.double() + 1e7 * mask, mask, uids, sessions=sessions)
    torch.testing.assert_close(shifted, base, atol=1e-5, rtol=0)


def test_sessions_must_nest_in_groups():
    with pytest.raises(ValueError, match="different uids"):
        bot_advantage(torch.ones(2, 2), torch.ones(2, 2), ["a", "b"], sessions=["s", "s"])


# ------------------------------------------------------------------------------- the advantage step hook
def test_session_keys_and_the_refusal():
    assert session_keys(["u1_0_0", "u1_1_0", "u2_0_0"]) is None  # one output per session: rows are rollouts
    sessions = session_keys(["u_1_0_0", "u_1_0_1", "u_1_1_0"])  # uids may hold '_'
    assert sessions.tolist() == ["u_1_0", "u_1_0", "u_1_1"]
    with pytest.raises(VerlBotConfigError) as exc:
        refuse_multi_output("pure", sessions)
    assert str(exc.value) == (
        "verl-bot: adv_estimator=pure does not support multi-output loops (session u_1_0 has 2 trajectories); "
        "use bot or grpo"
    )


def test_reward_metrics_count_each_sample_once():
    """verl copies a sample's last `reward_extra_info` to its earlier outputs: the step's reward/* metrics keep the
    last output of each sample (the highest j), so a sample of 3 outputs weighs what a sample of 1 weighs."""
    keys = ["u_1_0_0", "u_1_0_2", "u_1_0_1", "u_1_1_0", "v_0_0"]
    assert last_outputs(keys) == [False, True, False, True, True]
    assert last_outputs(["u1_0_0", "u1_1_0"]) == [True, True]  # one output per sample: every row


def test_a_failure_fails_its_whole_session():
    uids = np.array(["g", "g", "g", "g", "h", "h"], dtype=object)
    sessions = np.array(["g_0", "g_0", "g_1", "g_2", "h_0", "h_1"], dtype=object)
    failed = np.array([False, True, False, False, True, False])
    new_uids, zero = exclusion_uids(uids, failed, sessions)
    assert zero.tolist() == [True, True, False, False, True, True]  # h keeps one valid session: nothing to compare
    assert new_uids[0] == new_uids[1] == "g#failedg_0"  # the failed session stays one rollout (nests in its uid)
    by_rows = exclusion_uids(uids, failed)[1]
    assert by_rows.tolist() == [False, True, False, False, True, True]


# ------------------------------------------------------------------------------ manager on a session
def session_batch(tokenizer, outputs: list[tuple[str, str]], data_source: str = "toy_lint") -> DataProto:
    """verl's reward batch of one multi-output sample (AgentLoopWorker._compute_score: pad_sequence rows)."""
    from tensordict import TensorDict

    prompts = [torch.tensor(tokenizer.encode(p)) for p, _ in outputs]
    responses = [torch.tensor(tokenizer.encode(r)) for _, r in outputs]
    masks = [torch.ones(len(p) + len(r), dtype=torch.long) for p, r in zip(prompts, responses, strict=True)]
    pad = torch.nn.utils.rnn.pad_sequence
    n = len(outputs)
    batch = TensorDict({"prompts": pad(prompts, batch_first=True), "responses": pad(responses, batch_first=True),
                        "attention_mask": pad(masks, batch_first=True)}, batch_size=n)
    non_tensor = {"data_source": np.array([data_source] * n, dtype=object),
                  "reward_model": np.array([{"ground_truth": None}] * n, dtype=object),
                  "prompt_len": np.array([len(p) for p in prompts]),
                  "response_len": np.array([len(r) for r in responses])}
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def manager(tokenizer, scorer: str) -> BoTRewardManager:
    config = OmegaConf.create({"reward": {"reward_kwargs": {"bot": {"scorers": {"toy_lint": scorer}}}},
                               "algorithm": {"adv_estimator": "bot"}})
    return BoTRewardManager(config, tokenizer)


def expected_rewards(tokenizer, response_ids: list[int], verdict: dict, index: int, last: bool) -> list[float]:
    """Offline, from the tokenizer's decoding alone (`token_local` of tests/harness/manager.py): G on every token
    plus clip(S), S_t the mean over the token's characters of the values of the spans covering each (the
    trajectory's, and the top level's too for the last output), plus the trajectory's value."""
    entry = next(t for t in verdict["trajectories"] if t["index"] == index)
    spans = entry["local"] + (verdict["local"] if last else [])
    local = token_local(tokenizer, response_ids, spans) + entry["value"]
    return (verdict["global"]["score"] + np.clip(local, -1.0, 1.0)).tolist()


def test_each_output_gets_its_own_rewards_even_at_equal_lengths(tokenizer):
    """Two outputs of equal response length (verl copies the last output's reward_score to the first: only a
    length mismatch was caught before) get different rewards, each its own, picked by its ids."""
    outputs = [("Write good text", " aaa bbb"), ("Write good text aaa bbb again", " bbb aaa")]
    assert len(tokenizer.encode(outputs[0][1])) == len(tokenizer.encode(outputs[1][1]))
    data = session_batch(tokenizer, outputs)
    result = asyncio.run(manager(tokenizer, "python:tests.fixtures.two_turn_loop:toy_lint_sessions").run_single(data))
    rows = []
    for prompt, response in outputs:
        fields = dense_fields(result["reward_score"], len(tokenizer.encode(response)), {},
                              (tokenizer.encode(prompt), tokenizer.encode(response)))
        rows.append(fields["rm_scores"].tolist())
    assert rows[0] != rows[1]
    texts = [token_char_spans(tokenizer, tokenizer.encode(r))[0] for _, r in outputs]
    verdict = toy_lint_sessions(outputs[1][0], texts[1],
                                trajectories=[{"index": j, "response": t} for j, t in enumerate(texts)])
    for j, (_, response) in enumerate(outputs):
        want = expected_rewards(tokenizer, tokenizer.encode(response), verdict, j, j == 1)
        np.testing.assert_allclose(rows[j], want, atol=1e-6)


def test_the_manager_reads_lengths_from_response_len(tokenizer):
    """pad_sequence rows: the last output's response is shorter than the first's; the attention mask's tail would
    count the first's width and decode padding into the scored text."""
    outputs = [("Hi", " good good good good good good good good"), ("Hi good good good good good good", " ok")]
    data = session_batch(tokenizer, outputs)
    seen = []

    async def capture(prompt, response, ground_truth=None, extra_info=None, trajectories=None):
        seen.append((response, trajectories))
        return {"global": {"score": 1.0}}

    import sys
    import types

    sys.modules["vb_capture"] = types.SimpleNamespace(capture=capture)
    result = asyncio.run(manager(tokenizer, "python:vb_capture:capture").run_single(data))
    (response, trajectories), = seen
    assert response == token_char_spans(tokenizer, tokenizer.encode(" ok"))[0]
    assert [t["index"] for t in trajectories] == [0, 1] and trajectories[1]["response"] == response
    assert len(result["reward_score"]["token_rewards"]) == len(tokenizer.encode(" ok"))
    first = dense_fields(result["reward_score"], len(tokenizer.encode(outputs[0][1])), {},
                         (tokenizer.encode(outputs[0][0]), tokenizer.encode(outputs[0][1])))
    assert first["rm_scores"].tolist() == [1.0] * len(tokenizer.encode(outputs[0][1]))  # G only: no entry


def test_a_trajectory_without_rewards_is_fatal():
    score = session_reward_score([[1.0, 2.0]], [None])
    assert score == [1.0, 2.0]  # a single-output sample keeps its plain form
    session = session_reward_score([[9.0, 9.0], [1.0, 2.0]], [fingerprint([1], [2, 3]), fingerprint([1, 2, 3], [4, 5])])
    assert dense_fields(session, 2, {}, ([1], [2, 3]))["rm_scores"].tolist() == [9.0, 9.0]
    assert dense_fields(session, 2, {}, ([1, 2, 3], [4, 5]))["rm_scores"].tolist() == [1.0, 2.0]
    lost = dense_fields(session, 2, {"reward_extra_info": {}}, ([1], [2, 9]))  # ids changed after scoring
    message = lost["extra_fields"]["reward_extra_info"][FATAL_KEY]
    assert message.startswith("verl-bot: no token rewards for a trajectory of 2 response tokens")
    assert lost["rm_scores"].tolist() == [0.0, 0.0]


def test_verdict_trajectories_are_validated():
    ok = validate_verdict({"global": {"score": 1}, "trajectories": [{"index": 1, "value": 0.5}]}, trajectory_count=2)
    assert ok["trajectories"] == [{"index": 1, "local": [], "value": 0.5}]
    with pytest.raises(InvalidVerdict, match=r"trajectories\[0\].index=2; the session has 2"):
        validate_verdict({"global": {"score": 1}, "trajectories": [{"index": 2}]}, trajectory_count=2)
    with pytest.raises(InvalidVerdict, match="not finite"):
        validate_verdict({"global": {"score": 1}, "trajectories": [{"index": 0, "value": "nan"}]})


# ----------------------------------------------------------------------------------------- end to end
def test_two_output_loop_through_verls_trainer(workdir, tokenizer):
    """One trainer start, 2 steps of `bot` with a loop returning two outputs per sample: each row's rm_scores equal
    an offline recomputation from its own ids, the advantages equal the joined-rows reference, and
    bot/rollouts_per_group = n (4), not 2n."""
    loops = workdir / "two_turn_loops.yaml"
    loops.write_text("- name: bot_two_turn\n  _target_: tests.fixtures.two_turn_loop.TwoTurnLoop\n")
    run = Run(workdir, "two_turn", [
        "algorithm.adv_estimator=bot", "reward.reward_manager.name=bot",
        "+reward.reward_kwargs.bot.scorers.toy_lint=python:tests.fixtures.two_turn_loop:toy_lint_sessions",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=bot_two_turn",
    ])
    log, probe = run.dir / "outputs.jsonl", run.dir / "advantages.jsonl"
    run.env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), run.env["PYTHONPATH"]]),
                    "VERL_USE_EXTERNAL_MODULES": "tests.fixtures.two_turn_loop",
                    "VB_TWO_TURN_LOG": str(log), "VB_TWO_TURN_PROBE": str(probe)})
    run.finish(timeout=600)
    ids = {r["key"]: r for r in run.records(log)}
    steps = run.records(probe)
    assert len(steps) == 2
    for step in steps:
        rows = step["rows"]
        assert len(rows) == 4 * 4 * 2 and all(r["key"][-2:] in ("_0", "_1") for r in rows)
        assert step["metrics"]["bot/rollouts_per_group"] == 4.0
        sessions = [r["key"].rsplit("_", 1)[0] for r in rows]
        by_session: dict[str, list] = {}
        for row, session in zip(rows, sessions, strict=True):
            by_session.setdefault(session, []).append(row)
        differing = 0
        for members in by_session.values():
            members.sort(key=lambda r: r["key"])
            texts = [token_char_spans(tokenizer, ids[r["key"]]["response_ids"])[0] for r in members]
            prompt = tokenizer.decode(ids[members[-1]["key"]]["prompt_ids"], skip_special_tokens=True)
            verdict = validate_verdict(toy_lint_sessions(
                prompt, texts[-1], trajectories=[{"index": j, "response": t} for j, t in enumerate(texts)]
            ), trajectory_count=2)
            for j, row in enumerate(members):
                want = expected_rewards(tokenizer, ids[row["key"]]["response_ids"], verdict, j, j == 1)
                np.testing.assert_allclose(row["rewards"], want, atol=1e-5)
            differing += members[0]["rewards"][:1] != members[1]["rewards"][:1]
        assert differing > 0
        width = max(len(r["rewards"]) for r in rows)
        rewards = torch.zeros(len(rows), width, dtype=torch.float64)
        mask = torch.zeros(len(rows), width)
        for i, row in enumerate(rows):
            rewards[i, : len(row["rewards"])], mask[i, : len(row["rewards"])] = torch.tensor(row["rewards"]), 1
        want = joined_reference(rewards, mask, [r["uid"] for r in rows], sessions)
        for i, row in enumerate(rows):
            np.testing.assert_allclose(row["advantages"], want[i, : len(row["advantages"])].numpy(), atol=1e-4)

