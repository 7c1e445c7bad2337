"""A served step PRM as the local signal S (verl_bot/rewards/prm.py), against a fake vLLM `/pooling` server.

The fake speaks vLLM 0.27.1's pooling schema for `Qwen2ForProcessRewardModel` (`{"model", "input": ids, "task":
"token_classify"}` -> `{"data": [{"data": [[p_bad, p_good], ...]}]}`, one row per step tag): it decodes the ids
with the PRM's tokenizer and gives p_good = 0.9 to a step whose `a+b=c` / `a-b=c` equations all hold, 0.1 to any
other. Through verl's real `RewardLoopWorker` and the `bot` manager, the token rewards must be w_g * G + w_s * S
with S = +-0.8 (centred transform) on each step's characters, G from `builtin:toy_math`; faults must give the
failed-scorer sentinel or the fatal marker with their one line.
"""

import asyncio
import json
import re
import threading
import time

import numpy as np
import pytest
from aiohttp import web

from tests.conftest import compose_verl_config
from tests.harness import recipes
from tests.harness.manager import make_batch, worker_for
from tests.harness.recipes import recipe_data, recipe_node  # noqa: F401 - the fixtures `data` and `node`
from verl_bot.credit.spans import token_char_spans
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.launch.preflight import check_config
from verl_bot.rewards import prm
from verl_bot_demo.scorers import toy_math

TAG = "<extra_0>"
TASK = "Compute 3+4-2."
GOOD = "<step 1>3+4=7</step 1>\n\n<step 2>7-2=5</step 2>\n\n<final>5</final>"
BAD_FIRST = "<step 1>3+4=8</step 1>\n\n\n<step 2>8-2=6</step 2>\n\n<final>6</final>"
RESPONSES = [GOOD, BAD_FIRST]


class FakePrm:
    """vLLM's /pooling for a step PRM on loopback, its request and answer parsed and built by vLLM's own protocol
    models; `mode` makes it misbehave on purpose."""

    def __init__(self, tokenizer, mode="ok"):
        from pydantic import TypeAdapter
        from vllm.entrypoints.pooling.pooling.protocol import PoolingRequest, PoolingResponse

        self.tokenizer, self.mode, self.requests = tokenizer, mode, []
        self.parse, self.answer = TypeAdapter(PoolingRequest).validate_python, PoolingResponse
        app = web.Application()
        app.router.add_post("/pooling", self.pooling)
        self.loop = asyncio.new_event_loop()
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def probabilities(self, ids):
        text = self.tokenizer.decode(ids, skip_special_tokens=False).rsplit("assistant\n", 1)[1]
        rows = []
        for step in text.split(TAG)[:-1]:
            equations = re.findall(r"(\d+)([+-])(\d+)=(\d+)", step)
            good = bool(equations) and all(int(a) + (int(b) if op == "+" else -int(b)) == int(c)
                                           for a, op, b, c in equations)
            rows.append([0.1, 0.9] if good else [0.9, 0.1])
        return rows

    async def pooling(self, request):
        body = await request.json()
        self.requests.append(body)
        parsed = self.parse(body)  # raises on a request vLLM 0.27.1 would refuse
        assert parsed.to_pooling_params().task == "token_classify"
        if self.mode == "slow":
            await asyncio.sleep(3)
        if self.mode in ("http500", "http404"):
            return web.Response(status=int(self.mode[4:]), text="no")
        rows = self.probabilities(body["input"])
        rows = {"no_rows": [], "one_label": [[0.5] for _ in rows]}.get(self.mode, rows)
        usage = {"prompt_tokens": len(body["input"]), "total_tokens": len(body["input"])}
        answer = self.answer(model=body.get("model"), data=[{"index": 0, "data": rows}], usage=usage)
        return web.Response(text=answer.model_dump_json(), content_type="application/json")


@pytest.fixture(scope="module")
def prm_tokenizer_dir(tiny_model_dir, tmp_path_factory):
    """The tiny tokenizer plus the step tag as one special token (how Qwen2.5-Math-PRM's carries <extra_0>)."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("prm_tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": [TAG]})
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def prm_tokenizer(prm_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(prm_tokenizer_dir)


PRM = "+reward.reward_kwargs.bot.prm."


def prm_knobs(url, tokenizer_dir, estimator="bot", **knobs):
    base = {"url": url, "model": "prm", "tokenizer": str(tokenizer_dir), **knobs}
    return [f"algorithm.adv_estimator={estimator}", "+reward.reward_kwargs.bot.retries=0",
            *(f"+reward.reward_kwargs.bot.prm.{k}={v}" for k, v in base.items())]


def score(tiny_model_dir, tokenizer, responses, *overrides, ground_truth="5", data_source="toy_math"):
    worker, _ = worker_for(tiny_model_dir, *overrides)
    data, rows = make_batch(tokenizer, responses, data_source=data_source)
    data.non_tensor_batch["reward_model"] = np.array([{"ground_truth": ground_truth}] * len(rows), dtype=object)
    data.non_tensor_batch["raw_prompt"] = np.empty(len(rows), dtype=object)
    for i in range(len(rows)):
        data.non_tensor_batch["raw_prompt"][i] = [{"role": "user", "content": TASK}]
    return asyncio.run(worker.compute_score_batch(data)), rows


def reference_local(tokenizer, ids, step_values):
    """S_t the slow way: each character's step by scanning the text for blank-line runs, then each token's mean."""
    text, spans = token_char_spans(tokenizer, ids)
    char_step, step, i = [], 0, 0
    while i < len(text):
        run = len(text[i:]) - len(text[i:].lstrip("\n"))
        if run >= 2:  # a separator run belongs to the step it ends
            char_step += [step] * run
            step, i = step + 1, i + run
        else:
            char_step.append(step)
            i += 1
    per_char = [step_values[s] if s < len(step_values) else 0.0 for s in char_step]
    return np.array([np.mean(per_char[a:b]) if b > a else 0.0 for a, b in spans])


def g_of(response, ground_truth="5"):
    return asyncio.run(toy_math(TASK, response, ground_truth))["global"]["score"]


# ---- pure parts (the step splitter itself: tests/unit/test_steps.py) ---------------------------------


def test_a_think_block_is_not_scored():
    """A reasoning model's drafts inside <think> are no steps of the PRM (the servers score only the answer); a
    response cut off inside the block has none."""
    think = "<think>draft one\n\ndraft two</think>"
    steps = prm.answer_steps(think + "a\n\nb", "\n\n")
    assert [(s.start, s.end, s.text) for s in steps] == [(len(think), len(think) + 3, "a"),
                                                         (len(think) + 3, len(think) + 4, "b")]
    assert prm.answer_steps("<think>draft one\n\ndraft two", "\n\n") == []
    assert [s.text for s in prm.answer_steps("x\n\ny", "\n\n")] == ["x", "y"]  # no think block: all of it


def test_values_transforms_and_rows_checks():
    rows = [[0.1, 0.9], [0.75, 0.25]]
    assert prm.step_values(rows, 1, "centred", 1.0) == pytest.approx([0.8, -0.5])
    assert prm.step_values(rows, 0, "raw", 2.0) == pytest.approx([0.2, 1.5])
    assert prm.step_values(rows, 1, "log", 1.0) == pytest.approx([np.log(0.9), np.log(0.25)])
    assert prm.check_rows(rows, 2, TAG, 7) == rows
    with pytest.raises(prm.PrmNotAStepModel, match=r"^prm: 0 step scores for 2 tags: the server's step_tag_id is not "
                       r'<extra_0>=7 \(pooler_config \{"step_tag_id":7\}\)$'):
        prm.check_rows([], 2, TAG, 7)
    with pytest.raises(prm.PrmNotAStepModel, match="got 1 value: not a process reward model"):
        prm.check_rows([[0.3], [0.4]], 2, TAG, 7)
    with pytest.raises(prm.PrmNotAStepModel, match="got 1 value"):
        prm.check_rows([0.3, 0.4], 2, TAG, 7)  # a sequence classifier's flat vector
    with pytest.raises(prm.PrmUnavailable):
        prm.check_rows([[float("nan"), 0.5]], 1, TAG, 7)


def test_fitting_input_keeps_the_longest_prefix_of_steps_that_fits():
    def render(k):
        return [0] * (10 + 5 * k)  # prompt 10 tokens, 5 per step

    assert prm.fitting_input(render, 6, None) == ([0] * 40, 6)
    assert prm.fitting_input(render, 6, 40) == ([0] * 40, 6)
    for limit, kept in [(39, 5), (26, 3), (15, 1), (14, 0), (3, 0)]:
        ids, k = prm.fitting_input(render, 6, limit)
        assert k == kept and len(ids) == (10 + 5 * k if k else 0)


@pytest.mark.parametrize(
    "knob, message",
    [
        ("transform=sigmoid", f"{PRM}transform='sigmoid': must be one of centred, raw, log"),
        ("url=localhost:8000", f"{PRM}url='localhost:8000': must be router or an http(s):// URL of a vLLM pool"),
        ("url=router", "prm.url=router needs reward.reward_model.enable=true, or an http:// URL"),
        ("combine=mean", f"{PRM}combine='mean': must be one of replace, add"),
        ("positive_index=2", f"{PRM}positive_index=2: must be an integer in [0, 1]"),
        ("max_length=0", f"{PRM}max_length=0: must be an integer >= 1"),
        ("stepp_tag=x", f"unknown {PRM}stepp_tag: the PRM knobs are url, model, tokenizer, step_separator, step_tag, "),
        ("step_tag=zzzq", "prm.step_tag 'zzzq' is not one token of "),
        ("scale=1.0 actor_rollout_ref.rollout.multi_turn.enable=true",
         "with actor_rollout_ref.rollout.multi_turn.enable=true: the response holds tool replies"),
    ],
)
def test_preflight_refuses_prm_knobs_that_cannot_work(tiny_model_dir, prm_tokenizer_dir, knob, message):
    overrides = [f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot",
                 *prm_knobs("http://127.0.0.1:9", prm_tokenizer_dir)]
    key = knob.split("=")[0]
    overrides = [o for o in overrides if not o.startswith(f"+reward.reward_kwargs.bot.prm.{key}=")]
    knob, *more = knob.split(" ")
    config = compose_verl_config([*overrides, f"+reward.reward_kwargs.bot.prm.{knob}", *more])
    with pytest.raises(VerlBotConfigError, match=re.escape(message)):
        check_config(config)


def test_preflight_refuses_a_prm_without_token_rewards_and_passes_a_good_one(tiny_model_dir, prm_tokenizer_dir):
    base = [f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot"]
    with pytest.raises(VerlBotConfigError, match=r"with one reward per response \(token_level=false\)"):
        check_config(compose_verl_config([*base, *prm_knobs("http://127.0.0.1:9", prm_tokenizer_dir, "grpo")]))
    check_config(compose_verl_config([*base, *prm_knobs("http://127.0.0.1:9", prm_tokenizer_dir)]))


# ---- through verl's reward loop and the bot manager --------------------------------------------------


def test_prm_steps_become_token_rewards_and_calls_are_logged(
    tiny_model_dir, tokenizer, prm_tokenizer, prm_tokenizer_dir, tmp_path, monkeypatch
):
    server = FakePrm(prm_tokenizer)
    log = tmp_path / "prm.jsonl"
    monkeypatch.setenv(prm.LOG_ENV, str(log))
    outputs, rows = score(tiny_model_dir, tokenizer, RESPONSES, *prm_knobs(server.url, prm_tokenizer_dir),
                          "+reward.reward_kwargs.bot.w_local=0.5")
    step_values = [[0.8, 0.8, -0.8], [-0.8, 0.8, -0.8]]  # the final-answer step has no equation: p_good 0.1
    for out, ids, text, values in zip(outputs, rows, RESPONSES, step_values, strict=True):
        info = out["reward_extra_info"]
        assert info["prm_steps"] == 3 and info["prm_failed"] == 0 and info["scorer_failed"] == 0
        assert info["prm_truncated"] == 0 and info["prm_tag_in_text"] == 0
        expected = g_of(text) + 0.5 * reference_local(tokenizer, ids, values)
        np.testing.assert_allclose(out["reward_score"], expected, atol=1e-12)
    # hand-computed: the first token of GOOD lies inside step 1: G + 0.5 * 0.8; BAD_FIRST's: G - 0.4
    assert outputs[0]["reward_score"][0] == pytest.approx(g_of(GOOD) + 0.4)
    assert outputs[1]["reward_score"][0] == pytest.approx(g_of(BAD_FIRST) - 0.4)
    assert outputs[0]["reward_score"][-1] == pytest.approx(g_of(GOOD))  # EOS: no character, S = 0

    # one call per rollout, in Qwen2.5-Math-PRM's format: the system prompt, the task, step TAG step TAG ...
    assert len(server.requests) == 2 and {r["task"] for r in server.requests} == {"token_classify"}
    assert {r["model"] for r in server.requests} == {"prm"}
    # the two calls run concurrently: each request and log line is told by the response it carries, never by
    # its place in the server's list or the log (request 0 was BAD_FIRST's in 3 of 6 runs)
    tagged = {  # each response's steps as the PRM must see them, hand-written
        "GOOD": f"<step 1>3+4=7</step 1>{TAG}<step 2>7-2=5</step 2>{TAG}<final>5</final>{TAG}",
        "BAD_FIRST": f"<step 1>3+4=8</step 1>{TAG}<step 2>8-2=6</step 2>{TAG}<final>6</final>{TAG}",
    }

    def carried(ids):
        """The name of the one response whose steps the PRM input `ids` carries."""
        text = prm_tokenizer.decode(ids, skip_special_tokens=False)
        assert prm.QWEN_PRM_SYSTEM in text and TASK in text, text
        names = [name for name, steps in tagged.items() if steps in text]
        assert len(names) == 1, text
        return names[0]

    assert sorted(carried(r["input"]) for r in server.requests) == ["BAD_FIRST", "GOOD"]
    # the log replays: the same request to the same server gives the logged probabilities, one line per response
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 2 and {line["url"] for line in lines} == {f"{server.url}/pooling"}
    logged = {carried(line["request"]["input"]): line["probabilities"] for line in lines}
    assert logged == {"GOOD": [[0.1, 0.9], [0.1, 0.9], [0.9, 0.1]], "BAD_FIRST": [[0.9, 0.1], [0.1, 0.9], [0.9, 0.1]]}
    for line in lines:
        assert server.probabilities(line["request"]["input"]) == line["probabilities"]


def test_prm_feeds_the_process_stream_of_pure_and_pass(tiny_model_dir, tokenizer, prm_tokenizer, prm_tokenizer_dir):
    server = FakePrm(prm_tokenizer)
    for estimator in ("pure", "pass"):
        outputs, rows = score(tiny_model_dir, tokenizer, [BAD_FIRST], *prm_knobs(server.url, prm_tokenizer_dir,
                                                                                  estimator))
        reward = outputs[0]["reward_score"]
        local = reference_local(tokenizer, rows[0], [-0.8, 0.8, -0.8])
        np.testing.assert_allclose(reward["streams"]["local"], local, atol=1e-12)
        np.testing.assert_allclose(reward["token_rewards"], g_of(BAD_FIRST) + local, atol=1e-12)


def test_combine_add_keeps_the_scorers_own_spans_and_data_sources_limit_the_prm(
    tiny_model_dir, tokenizer, prm_tokenizer, prm_tokenizer_dir
):
    server = FakePrm(prm_tokenizer)
    plain, rows = score(tiny_model_dir, tokenizer, [BAD_FIRST], "algorithm.adv_estimator=bot")
    added, _ = score(tiny_model_dir, tokenizer, [BAD_FIRST],
                     *prm_knobs(server.url, prm_tokenizer_dir, combine="add"), "+reward.reward_kwargs.bot.local_clip=0")
    prm_only = reference_local(tokenizer, rows[0], [-0.8, 0.8, -0.8])
    np.testing.assert_allclose(added[0]["reward_score"], np.asarray(plain[0]["reward_score"]) + prm_only, atol=1e-12)
    assert not np.allclose(plain[0]["reward_score"], g_of(BAD_FIRST))  # toy_math's own judge has spans here

    calls = len(server.requests)
    other, _ = score(tiny_model_dir, tokenizer, [BAD_FIRST],
                     *prm_knobs(server.url, prm_tokenizer_dir, data_sources="[aime]"))
    assert len(server.requests) == calls  # toy_math is not the PRM's: no call, the scorer's S
    np.testing.assert_allclose(other[0]["reward_score"], plain[0]["reward_score"])
    assert other[0]["reward_extra_info"]["prm_steps"] == 0


def test_truncation_and_tag_text_are_flagged(tiny_model_dir, tokenizer, prm_tokenizer, prm_tokenizer_dir):
    server = FakePrm(prm_tokenizer)
    tagged = GOOD.replace("3+4=7", f"3+4=7{TAG}")
    outputs, rows = score(tiny_model_dir, tokenizer, [GOOD, tagged], *prm_knobs(server.url, prm_tokenizer_dir))
    assert outputs[1]["reward_extra_info"]["prm_tag_in_text"] == 1 and outputs[1]["reward_extra_info"]["prm_steps"] == 3
    assert [r["input"].count(prm_tokenizer.convert_tokens_to_ids(TAG)) for r in server.requests] == [3, 3]

    # the two calls ran concurrently; the tag text removed, both carry the same input, whichever came first
    assert server.requests[0]["input"] == server.requests[1]["input"]
    full = len(server.requests[0]["input"])
    step3 = len(prm_tokenizer("<final>5</final>" + TAG, add_special_tokens=False)["input_ids"])
    outputs, rows = score(tiny_model_dir, tokenizer, [GOOD],
                          *prm_knobs(server.url, prm_tokenizer_dir, max_length=full - step3))
    info = outputs[0]["reward_extra_info"]
    assert info["prm_truncated"] == 1 and info["prm_steps"] == 2 and "prm_truncated" in info["flags"].split(",")
    assert len(server.requests[-1]["input"]) <= full - step3
    expected = g_of(GOOD) + reference_local(tokenizer, rows[0], [0.8, 0.8])  # the last step unscored: S = 0
    np.testing.assert_allclose(outputs[0]["reward_score"], expected, atol=1e-12)


@pytest.mark.parametrize("mode", ["http500", "slow"])
def test_a_prm_fault_is_the_failed_scorer_sentinel(tiny_model_dir, tokenizer, prm_tokenizer, prm_tokenizer_dir, mode):
    server = FakePrm(prm_tokenizer, mode)
    t0 = time.monotonic()
    outputs, _ = score(tiny_model_dir, tokenizer, [GOOD], *prm_knobs(server.url, prm_tokenizer_dir),
                       "+reward.reward_kwargs.bot.timeout_s=1", "+reward.reward_kwargs.bot.failure_score=-0.25")
    info = outputs[0]["reward_extra_info"]
    assert time.monotonic() - t0 < 30
    assert info["scorer_failed"] == 1 and info["prm_failed"] == 1 and FATAL_KEY not in info
    assert info["scorer_error_msg"].startswith("prm: ")
    assert set(outputs[0]["reward_score"]) == {-0.25}  # G = failure_score on every token, S = 0


@pytest.mark.parametrize(
    "mode, message",
    [
        ("http404", "/pooling answered 404: the served model is not a pooling PRM"),
        ("no_rows", "prm: 0 step scores for 3 tags: the server's step_tag_id is not <extra_0>="),
        ("one_label", "prm: expected [p_bad, p_good] per step, got 1 value: not a process reward model"),
    ],
)
def test_a_server_that_is_not_a_step_prm_stops_the_run(
    tiny_model_dir, tokenizer, prm_tokenizer, prm_tokenizer_dir, mode, message
):
    server = FakePrm(prm_tokenizer, mode)
    outputs, _ = score(tiny_model_dir, tokenizer, [GOOD], *prm_knobs(server.url, prm_tokenizer_dir))
    info = outputs[0]["reward_extra_info"]
    assert message in info[FATAL_KEY] and "\n" not in info[FATAL_KEY]
    assert set(outputs[0]["reward_score"]) == {0.0}


# ---- the AIME recipes ------------------------------------------------------------------------------


def test_the_aime_recipes_pass_a_prm_and_refuse_it_where_s_goes_nowhere(data, node, prm_tokenizer_dir):
    """DRY_RUN=args on the fake node: a PRM_URL becomes the prm knobs (composed by Hydra, read by prm_settings); a
    PRM_MODEL_PATH gets GPUs of the node plan and the port the recipe serves it on; no step judge is required."""
    args, err = recipes.dry_run_args(node, "aime_qwen", data, ALGO="pure", PRM_URL="http://127.0.0.1:9",
                                     PRM_MODEL="prm", PRM_TOKENIZER=str(prm_tokenizer_dir), PRM_SCALE="0.5")
    settings = prm.prm_settings(compose_verl_config(args))
    assert (settings.url, settings.model, settings.tokenizer) == ("http://127.0.0.1:9", "prm", str(prm_tokenizer_dir))
    assert (settings.step_tag, settings.transform, settings.scale, settings.combine) == (
        TAG, "centred", 0.5, "replace")

    args, err = recipes.dry_run_args(node, "aime_smollm", data, PRM_MODEL_PATH="Qwen/Qwen2.5-Math-PRM-7B")
    assert "+reward.reward_kwargs.bot.prm.url=\"http://127.0.0.1:8010\"" in args
    assert "PRM GPUs" in next(line for line in err.splitlines() if line.startswith("node plan:"))

    for name, algo, line in [
        ("aime_phi", "grpo", "recipe: PRM_MODEL_PATH / PRM_URL with ALGO=grpo: the PRM's step scores are the local"),
        ("react_qwen", "bot", "recipe: PRM_MODEL_PATH / PRM_URL: a step PRM scores AIME's steps; the react recipes"),
    ]:
        env = recipes.base_env(data, DRY_RUN="args", ALGO=algo, PRM_URL="http://127.0.0.1:9", PRM_MODEL="prm",
                               **recipes.data_env(name, data))
        res = recipes.run_recipe(name, env)
        assert res.returncode == 2 and recipes.last_line(res.stderr).startswith(line), res.stderr[-500:]
