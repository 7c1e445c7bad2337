"""Per-turn credit for multi-turn responses (verl's ToolAgentLoop): the turn layout, verdict turns, per-turn token
values, the `bot` manager on a multi-turn row inside verl's reward loop, and the `toy_calc` task's parts.

Hand-computed values throughout; the manager test runs verl's real `RewardLoopWorker`."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl import DataProto

from tests.conftest import compose_verl_config
from tests.harness.recipes import cpu_train_args
from verl_bot.credit.token_credit import CreditSettings, OutputLayout, TokenLayout, token_credit
from verl_bot.credit.turns import (
    MASK_KEY,
    has_context,
    multi_turn_info,
    rollout_mask,
    turn_count,
    turn_ids,
    turn_layout,
    turn_token_values,
)
from verl_bot.credit.verdict import InvalidVerdict, validate_verdict
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot_demo.calc import called_expression, evaluate, final_answer, tool_call
from verl_bot_demo.scorers import toy_calc
from verl_bot_demo.toy_calc import chat
from verl_bot_demo.toy_math import Problem

MISSING_MASK = ("verl-bot: multi-turn rollout reached the bot manager without its response_mask "
                "(AgentLoopWorker._compute_score hook missing)")
MASK = [1, 1, 1, 0, 0, 1, 1]  # turn 0 (3 tokens, its EOS last), 2 context tokens, turn 1 (2 tokens)
SPANS = np.array([[0, 2], [2, 3], [3, 3], [3, 5], [5, 9], [9, 10], [10, 10]])  # EOS tokens cover no character


def test_turn_ids_count_and_context_by_hand():
    np.testing.assert_array_equal(turn_ids(MASK), [0, 0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(turn_ids([1, 1, 0, 0, 1, 1, 0, 1]), [0, 0, 0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(turn_ids([0, 1, 1, 0, 1]), [0, 0, 0, 0, 1])  # leading context: turn 0's
    assert [turn_count(m) for m in (MASK, [1, 1, 0, 0, 1, 1, 0, 1], [1, 1], [0, 0], [])] == [2, 3, 1, 0, 0]
    assert [has_context(m) for m in (MASK, [1, 1], [], [1, 0])] == [True, False, False, True]


def test_turn_layout_gives_each_run_its_characters():
    assert turn_layout(MASK, SPANS) == [
        {"turn": 0, "role": "assistant", "start": 0, "end": 3},
        {"turn": 0, "role": "context", "start": 3, "end": 9},
        {"turn": 1, "role": "assistant", "start": 9, "end": 10},
    ]
    # an assistant run of an EOS alone covers no character; the runs still tile the text
    assert turn_layout([1, 0, 1], np.array([[0, 0], [0, 4], [4, 4]])) == [
        {"turn": 0, "role": "assistant", "start": 0, "end": 0},
        {"turn": 0, "role": "context", "start": 0, "end": 4},
        {"turn": 1, "role": "assistant", "start": 4, "end": 4},
    ]
    assert TokenLayout((OutputLayout("x" * 10, SPANS, np.array(MASK)),)).turn_count == 2  # the verdict's range
    assert TokenLayout((OutputLayout("x" * 10, SPANS),)).turn_count == 1


def test_turn_values_land_on_every_generated_token_of_their_turn_eos_included():
    values = turn_token_values([{"turn": 0, "value": -0.5}, {"turn": 1, "value": 0.5}, {"turn": 1, "value": 0.25}],
                               MASK)
    np.testing.assert_array_equal(values, [-0.5, -0.5, -0.5, 0, 0, 0.75, 0.75])
    np.testing.assert_array_equal(turn_token_values([], MASK), np.zeros(7))
    # spans add up with turns (`token_credit`, G = 0, no clip: r = S); a span value on a context token is dropped
    # (the context token gets no S) and reported
    layout = TokenLayout((OutputLayout("x" * 10, SPANS, np.array(MASK)),))
    raw = {"global": {"score": 0.0}, "turns": [{"turn": 1, "value": 0.5}],
           "local": [{"start": 0, "end": 2, "value": 0.25}, {"start": 3, "end": 5, "value": 1.0}]}
    credit = token_credit(validate_verdict(raw, turn_count=2), layout, CreditSettings(local_clip=0.0))
    np.testing.assert_array_equal(credit.reward_score, [0.25, 0, 0, 0, 0, 0.5, 0.5])
    assert credit.info["local_on_context"] == 1.0
    quiet = token_credit(validate_verdict({"global": {"score": 0.0}}, turn_count=2), layout, CreditSettings())
    assert quiet.info["local_on_context"] == 0.0
    single = TokenLayout((OutputLayout("ab", np.array([[0, 1], [1, 2]])),))  # single turn: every token is turn 0's
    raw = {"global": {"score": 0.0}, "turns": [{"turn": 0, "value": 1.0}],
           "local": [{"start": 0, "end": 1, "value": 0.1}, {"start": 1, "end": 2, "value": 0.2}]}
    credit = token_credit(validate_verdict(raw), single, CreditSettings(local_clip=0.0))
    np.testing.assert_allclose(credit.reward_score, [1.1, 1.2])
    assert "local_on_context" not in credit.info
    per_response = CreditSettings(layout="scalar")  # one reward per response: turn values dropped, and counted
    assert token_credit(validate_verdict(raw), single, per_response).info["turns_unused"] == 1.0
    assert "turns_unused" not in token_credit(validate_verdict({"global": {"score": 0.0}}), single, per_response).info


def test_verdict_turns_are_validated_against_the_response():
    base = {"global": {"score": 1.0}, "local": []}
    assert validate_verdict(base)["turns"] == []
    ok = validate_verdict({**base, "turns": [{"turn": 1, "value": "0.5"}]}, turn_count=2)
    assert ok["turns"] == [{"turn": 1, "value": 0.5}]
    with pytest.raises(InvalidVerdict, match=r"^turns\[1\]\.turn=3; the response has turns 0\.\.1$"):
        validate_verdict({**base, "turns": [{"turn": 0, "value": 1}, {"turn": 3, "value": 1}]}, turn_count=2)
    with pytest.raises(InvalidVerdict, match=r"turns\[0\]\.turn=1; the response has turns 0\.\.0"):
        validate_verdict({**base, "turns": [{"turn": 1, "value": 1}]})  # a single-turn response has turn 0 only
    for bad in ([{"turn": True, "value": 1}], [{"turn": "0", "value": 1}], [{"turn": 0, "value": float("nan")}],
                {"turn": 0}):
        with pytest.raises(InvalidVerdict):
            validate_verdict({**base, "turns": bad}, turn_count=2)


def test_rollout_mask_and_verls_multi_turn_extra_info():
    assert rollout_mask(None, 2, 5) is None  # single-turn agent loop: no mask needed
    assert rollout_mask({}, None, 5) is None
    np.testing.assert_array_equal(rollout_mask({MASK_KEY: MASK}, 4, 7), MASK)
    for fields, turns in (({}, 4), ({"turn_scores": [], "tool_rewards": []}, 2)):
        with pytest.raises(VerlBotConfigError) as info:
            rollout_mask(fields, turns, 7)
        assert str(info.value) == MISSING_MASK
    with pytest.raises(VerlBotConfigError, match="the response mask has 7 tokens, the response 6"):
        rollout_mask({MASK_KEY: MASK}, 4, 6)
    fields = {"turn_scores": [np.float32(0.5)], "tool_rewards": [], MASK_KEY: MASK}
    assert multi_turn_info(fields, np.int64(4)) == {"num_turns": 4, "turn_scores": [0.5], "tool_rewards": []}
    assert multi_turn_info({}, 2) == {}


def test_only_the_estimators_of_blank_line_steps_are_refused_with_multi_turn():
    config = {"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": True}}}}
    from verl_bot.advantage import ESTIMATORS

    def problem(name, cfg=config):
        check = ESTIMATORS[name].check
        return check(cfg, []) if check is not None else None

    assert problem("pure") == (
        "adv_estimator=pure: blank-line steps also occur in tool responses; not supported with multi_turn.enable=true"
    )
    assert problem("pass") is None  # pass reads `local` per token, no blank-line steps
    assert problem("bot") is None
    assert problem("pure", {"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}}}}) is None


def test_preflight_refuses_pure_with_multi_turn_before_ray(tiny_model_dir):
    from verl_bot.launch.preflight import check_config

    config = compose_verl_config([f"actor_rollout_ref.model.path={tiny_model_dir}", "algorithm.adv_estimator=pure",
                                  "reward.reward_manager.name=bot", "actor_rollout_ref.rollout.multi_turn.enable=true"])
    with pytest.raises(VerlBotConfigError, match=r"^adv_estimator=pure: blank-line steps also occur in tool"):
        check_config(config)


# ------------------------------------------------------------------------------------------ the toy_calc task
PROBLEM = Problem(3, (("+", 4), ("-", 2)))  # "Compute 3+4-2." = 5


def _turns(a0: str, context: str, a1: str) -> tuple[str, list[dict]]:
    text = a0 + context + a1
    return text, [{"turn": 0, "role": "assistant", "start": 0, "end": len(a0)},
                  {"turn": 0, "role": "context", "start": len(a0), "end": len(a0) + len(context)},
                  {"turn": 1, "role": "assistant", "start": len(a0) + len(context), "end": len(text)}]


def test_calculator_and_parsing():
    assert [evaluate(e) for e in ("3+4-2", "12 - 3 + 1", "7", "9-9-9")] == ["5", "10", "7", "-9"]
    assert all(evaluate(e).startswith("error") for e in ("3*4", "", "3+", "import os", "1+" * 40 + "1"))
    assert called_expression(tool_call("3+4-2") + "<|im_end|>") == "3+4-2"
    assert called_expression('<tool_call>{"name": "other", "arguments": {"expression": "1"}}</tool_call>') is None
    assert called_expression("<tool_call>not json</tool_call>") is None
    assert final_answer("x <final> 5 </final>") == "5" and final_answer("5") is None


@pytest.mark.parametrize(("a0", "tool", "a1", "g", "values"), [
    (tool_call("3+4-2"), "5", "<final>5</final>", 1.0, [0.5, 0.5]),  # right call, used the tool's answer
    (tool_call("3+4-1"), "6", "<final>6</final>", 0.0, [-0.5, 0.5]),  # wrong call, faithful to the tool
    (tool_call("3+4-2"), "5", "<final>4</final>", 0.0, [0.5, -0.5]),  # right call, ignored the tool
])
def test_toy_calc_scores_each_turn(a0, tool, a1, g, values):
    text, turns = _turns(a0, f"\ntool\n{tool}\nassistant\n", a1)
    verdict = toy_calc("Compute 3+4-2.", text, "5", None, turns=turns)
    assert verdict["global"]["score"] == g and verdict["info"]["correct"] == bool(g)
    assert verdict["turns"] == [{"turn": 0, "value": values[0]}, {"turn": 1, "value": values[1]}]
    validate_verdict(verdict, turn_count=2)


def test_toy_calc_single_turn_answer_without_the_tool():
    verdict = toy_calc("Compute 3+4-2.", "<final>5</final>", "5", {"expression": "3+4-2"}, turns=None)
    assert verdict["global"]["score"] == 1.0
    assert verdict["turns"] == [{"turn": 0, "value": -0.5}] and verdict["flags"] == ["no_tool_call"]


def test_warm_start_chat_labels_only_the_assistant_turns_and_their_eos(tokenizer):
    from verl_bot_demo.pretrain import _chat_ids

    messages = [{"role": "user", "content": PROBLEM.prompt}, *chat(PROBLEM, random.Random(0))]
    ids, labels = _chat_ids(tokenizer, messages)
    trained = [i for i, label in zip(ids, labels, strict=True) if label != -100]
    eos = tokenizer.eos_token_id
    expected = (tokenizer(tool_call("3+4-2"), add_special_tokens=False)["input_ids"] + [eos]
                + tokenizer("<final>5</final>", add_special_tokens=False)["input_ids"] + [eos])
    assert trained == expected
    assert tokenizer.decode(ids).count("<|im_start|>tool\n5<|im_end|>") == 1  # the tool's answer, not trained


# ------------------------------------------------------------------- the bot manager on a multi-turn row
CAPTURED: list[dict] = []


def capture_calc(prompt, response, ground_truth=None, extra_info=None, turns=None):
    """toy_calc, recording what a `python:` scorer with a `turns` parameter receives."""
    CAPTURED.append({"response": response, "extra_info": extra_info, "turns": turns})
    return toy_calc(prompt, response, ground_truth, extra_info, turns=turns)


def tool_reply_span(prompt, response, ground_truth=None, extra_info=None, turns=None):
    """toy_calc's G with no turn values and one local span, -1 exactly on the tool reply (the response's context run):
    text the policy never generated."""
    verdict = toy_calc(prompt, response, ground_truth, extra_info, turns=turns)
    context = next(run for run in turns if run["role"] == "context")
    return {**verdict, "turns": [], "local": [{"start": context["start"], "end": context["end"], "value": -1.0}]}


def _tool_row(tokenizer, final: str, fields: dict | None, num_turns: int = 4) -> tuple[DataProto, list[int]]:
    """One ToolAgentLoop-like row (prompt, tool call, tool reply 5, final answer) and its response mask."""
    from verl_bot_demo.pretrain import _chat_ids

    chat_messages = [{"role": "user", "content": PROBLEM.prompt}, {"role": "assistant", "content": tool_call("3+4-2")},
                     {"role": "tool", "content": "5"}, {"role": "assistant", "content": f"<final>{final}</final>"}]
    prompt_ids, _ = _chat_ids(tokenizer, chat_messages[:1])
    prompt_ids = prompt_ids + tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    ids, labels = _chat_ids(tokenizer, chat_messages)
    response, mask = ids[len(prompt_ids) : -1], [int(v != -100) for v in labels[len(prompt_ids) : -1]]
    prompts, responses = torch.tensor([prompt_ids]), torch.tensor([response])
    batch = TensorDict({"prompts": prompts, "responses": responses,
                        "attention_mask": torch.ones(1, prompts.shape[1] + responses.shape[1], dtype=torch.long)},
                       batch_size=1)
    extra_fields = None if fields is None else {**fields, MASK_KEY: mask}
    non_tensor = {
        "data_source": np.array(["toy_calc"], dtype=object),
        "reward_model": np.array([{"style": "rule", "ground_truth": "5"}], dtype=object),
        "extra_info": np.array([{"expression": "3+4-2"}], dtype=object),
        "raw_prompt": np.array([[{"role": "user", "content": PROBLEM.prompt}]], dtype=object),
        "__num_turns__": np.array([num_turns]),
        "tool_extra_fields": np.array([extra_fields if extra_fields is not None else {}], dtype=object),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor), mask


def test_bot_manager_puts_each_turns_value_on_its_tokens_inside_verls_reward_loop(tiny_model_dir, tokenizer):
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    config = compose_verl_config([
        f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot",
        "algorithm.adv_estimator=bot", "+reward.reward_kwargs.bot.w_local=0.8",
        "+reward.reward_kwargs.bot.scorers.toy_calc=python:tests.unit.test_turns:capture_calc"])
    worker = RewardLoopWorker(config)
    CAPTURED.clear()
    data, mask = _tool_row(tokenizer, "4", {"turn_scores": [], "tool_rewards": [0.25]})
    (out,) = asyncio.run(worker.compute_score_batch(data))
    rewards, m, turns = np.asarray(out["reward_score"]), np.asarray(mask), turn_ids(mask)
    assert m[0] == 1 and m[-1] == 1 and (m == 0).any()  # 1 -> 0 -> 1
    # G = 0 (answered 4); turn 0 +0.5 (right call), turn 1 -0.5 (ignored the tool); w_s = 0.8; context: G only
    np.testing.assert_allclose(rewards[(m == 1) & (turns == 0)], 0.4)
    np.testing.assert_allclose(rewards[(m == 1) & (turns == 1)], -0.4)
    np.testing.assert_allclose(rewards[m == 0], 0.0)
    assert out["reward_extra_info"]["local_on_context"] == 0.0 and out["reward_extra_info"]["local_signal"] == 1.0
    (seen,) = CAPTURED
    assert [(t["turn"], t["role"]) for t in seen["turns"]] == [(0, "assistant"), (0, "context"), (1, "assistant")]
    a0 = seen["turns"][0]
    assert seen["response"][a0["start"] : a0["end"]] == tool_call("3+4-2")
    assert seen["response"][seen["turns"][2]["start"] :] == "<final>4</final>"
    assert seen["extra_info"] == {"expression": "3+4-2", "num_turns": 4, "turn_scores": [], "tool_rewards": [0.25]}

    # without the hook's mask a multi-turn row stops the run (fatal marker), it is never scored as one text
    data, _ = _tool_row(tokenizer, "5", None)
    (out,) = asyncio.run(worker.compute_score_batch(data))
    assert out["reward_extra_info"][FATAL_KEY] == MISSING_MASK


    # one reward per response (verl's grpo): G alone, and the dropped turn values are counted
    config = compose_verl_config([
        f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot",
        "algorithm.adv_estimator=grpo"])
    data, _ = _tool_row(tokenizer, "5", {"turn_scores": [], "tool_rewards": []})
    (out,) = asyncio.run(RewardLoopWorker(config).compute_score_batch(data))
    assert out["reward_score"] == 1.0 and out["reward_extra_info"]["turns_unused"] == 1.0


def test_a_span_on_the_tool_reply_gives_no_token_any_s_inside_verls_reward_loop(tiny_model_dir, tokenizer):
    """Regression (issue 44): a `local` span that lands only on a tool reply wrote S into those context tokens'
    rewards (mask 0) and counted the rollout in `reward/local_signal/mean`. Context tokens get no S."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    config = compose_verl_config([
        f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot",
        "algorithm.adv_estimator=bot", "+reward.reward_kwargs.bot.scorers.toy_calc=python:tests.unit.test_turns:"
        "tool_reply_span"])
    data, mask = _tool_row(tokenizer, "5", {"turn_scores": [], "tool_rewards": []})
    (out,) = asyncio.run(RewardLoopWorker(config).compute_score_batch(data))
    assert 0 in mask and out["reward_extra_info"]["score"] == 1.0  # answered 5: G = 1
    assert out["reward_score"] == [1.0] * len(mask)  # G on every token, S on none
    assert out["reward_extra_info"]["local_signal"] == 0.0 and out["reward_extra_info"]["local_on_context"] == 1.0


def test_response_mask_hook_carries_the_mask_for_the_call_only(tiny_model_dir):
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    from verl_bot.hooks.response_mask import _make_wrapper

    seen = []

    async def original(self, outputs, kwargs):
        seen.append([dict(o.extra_fields) for o in outputs])

    class Worker:
        config = compose_verl_config([f"actor_rollout_ref.model.path={tiny_model_dir}",
                                      "reward.reward_manager.name=bot"])

    output = AgentLoopOutput(prompt_ids=[1], response_ids=[2, 3, 4], response_mask=[1, 0, 1],
                             metrics=AgentLoopMetrics(), extra_fields={"turn_scores": []})
    asyncio.run(_make_wrapper(original)(Worker(), [output], {}))
    assert seen == [[{"turn_scores": [], MASK_KEY: [1, 0, 1]}]]
    assert output.extra_fields == {"turn_scores": []}  # never reaches TransferQueue
    Worker.config = compose_verl_config([f"actor_rollout_ref.model.path={tiny_model_dir}"])  # not a bot run
    asyncio.run(_make_wrapper(original)(Worker(), [output], {}))
    assert seen[-1] == [{"turn_scores": []}]


def test_a_verl_reward_function_gets_the_turns_and_may_return_values_per_turn(tiny_model_dir):
    from verl_bot.rewards.verl_scorer import VerlFunctionScorer, verdict_from_result

    seen = []

    def compute_score(data_source, solution_str, ground_truth, extra_info):
        seen.append(extra_info)
        return {"score": 1.0, "turns": [{"turn": 1, "value": 0.5}]}

    config = compose_verl_config([f"actor_rollout_ref.model.path={tiny_model_dir}", "reward.reward_manager.name=bot"])
    scorer = VerlFunctionScorer(config, compute_score, workers=0, timeout_s=10).for_source("toy_calc")
    turns = turn_layout(MASK, SPANS)
    verdict = asyncio.run(scorer.score({"prompt": "p", "response": "x" * 10, "ground_truth": "5",
                                        "extra_info": {"num_turns": 4}, "turns": turns}))
    assert seen == [{"num_turns": 4, "turns": turns}]
    assert validate_verdict(verdict, turn_count=2)["turns"] == [{"turn": 1, "value": 0.5}]
    assert "turns" not in verdict_from_result({"score": 1.0})  # a single-turn function's verdict, as before


def test_cpu_train_runs_toy_calc_through_verls_tool_agent_loop():
    cfg = compose_verl_config(cpu_train_args("bot", "toy_calc"))
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.agent.default_agent_loop, rollout.multi_turn.enable, rollout.multi_turn.format) == (
        "tool_agent", True, "hermes")
    assert rollout.multi_turn.function_tool_path.endswith("verl_bot_demo/calc_tool.py")
    assert (cfg.data.max_response_length, cfg.reward.reward_manager.name) == (96, "bot")
    pure = compose_verl_config(cpu_train_args("pure", "toy_calc"))
    from verl_bot.advantage.pure import startup_problem

    assert startup_problem(pure, []).startswith("adv_estimator=pure: blank-line steps")  # refused at start-up
