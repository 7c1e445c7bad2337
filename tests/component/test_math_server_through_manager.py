"""The whole reward path for AIME: verl's reward-loop worker runs the `bot` manager, which calls the real math
reward server over HTTP (real math-verify, deterministic fake step judge) and turns its step spans into
per-token rewards r_t = w_g * G + w_s * S_t."""

import asyncio

import numpy as np
import pytest

from reward_servers.common.fake_judge import FakeJudge
from reward_servers.common.judge import JudgeConfig
from reward_servers.common.service import ServerThread, create_app
from reward_servers.math.config import MathConfig
from reward_servers.math.server import MathScorer
from tests.harness.manager import make_batch, token_spans, worker_for
from tests.harness.math_judge import RULES, steps


@pytest.fixture(scope="module")
def math_server():
    with FakeJudge(RULES, model="fake-step-judge") as judge:
        cfg = MathConfig(
            workers=1,
            judge_enabled=True,
            judge=JudgeConfig(base_url=judge.base_url, timeout_s=2.0, max_retries=1, backoff_s=0.01),
        )
        with ServerThread(create_app(MathScorer(cfg))) as srv:
            yield srv


def test_step_spans_become_token_rewards(tiny_model_dir, tokenizer, math_server):
    response = steps("3 * 11 is 30 + 3.", "WRONG: so it is 34.", "Check: 33.")
    worker, _ = worker_for(tiny_model_dir, f"+reward.reward_kwargs.bot.scorers.aime='{math_server.url}'")
    data, rows = make_batch(tokenizer, [response], data_source="aime")
    data.non_tensor_batch["reward_model"][0] = {"style": "rule", "ground_truth": "33"}
    (out,) = asyncio.run(worker.compute_score_batch(data))

    info = out["reward_extra_info"]
    assert info["scorer_failed"] == 0.0
    assert info["score"] == pytest.approx(3.2) and info["answer"] == 3.0 and info["format"] == 0.2
    text, spans = token_spans(tokenizer, rows[0])
    rewards = np.asarray(out["reward_score"])
    assert len(rewards) == len(rows[0])

    def reward_of(fragment):  # tokens wholly inside a fragment of the response
        start = text.index(fragment)
        inside = [i for i, (s, e) in enumerate(spans) if start <= s and e <= start + len(fragment) and e > s]
        assert inside, fragment
        return set(np.round(rewards[inside], 6))

    # error propagation: step 1 correct (+1), step 2 incorrect (-1), step 3 after the error (0); 0.5 * e_s / |S|
    assert reward_of("3 * 11 is 30 + 3.") == {round(3.2 + 0.5 / 3, 6)}
    assert reward_of("WRONG: so it is 34.") == {round(3.2 - 0.5 / 3, 6)}
    assert reward_of("Check: 33.") == {3.2}
    assert reward_of("<final>33</final>") == {3.2}
    assert rewards[-1] == pytest.approx(3.2)  # EOS: G only
