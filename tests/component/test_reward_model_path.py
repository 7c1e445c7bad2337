"""verl's reward-model path (`reward.reward_model.enable=true`) with the `bot` manager.

- The start-up checks refuse, in one line each before Ray starts, every configuration in which the `bot` manager
  cannot use the served model (`verl_bot.rewards.reward_model_path`), and admit the two that work.
- verl 0.9.1's real `RewardLoopWorker` with a served model: the `bot` manager scores every rollout
  (`verl_bot.hooks.reward_model_path`; verl alone would ask the model's `/classify` endpoint, as it still does
  for its own managers: a fake router here records what it is asked), and a GenRM-style custom function gets
  `reward_router_address` and `reward_model_tokenizer` as verl's `naive` manager passes them, in a worker
  process, in the reward loop's threads and awaited (`verl_bot.rewards.verl_scorer`).
"""

import asyncio
import threading

import pytest
from aiohttp import web

from tests.conftest import compose_verl_config, free_port
from tests.harness.config import BOT, config
from tests.harness.manager import make_batch
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch.preflight import check_config

RM = "reward.reward_model"
SERVED = (f"{RM}.enable=true", f"{RM}.enable_resource_pool=true", f"{RM}.n_gpus_per_node=1", f"{RM}.nnodes=1",
          f"{RM}.rollout.name=vllm", f"{RM}.rollout.free_cache_engine=false", f"{RM}.model_path=/nonexistent/prm")
PRM = ("+reward.reward_kwargs.bot.prm.url=router",)

GENRM_FN = """
def genrm(data_source, solution_str, ground_truth, extra_info=None, reward_router_address=None,
          reward_model_tokenizer=None):
    return {"score": 1.0, "router": reward_router_address == "127.0.0.1:9",
            "rm_vocab": len(reward_model_tokenizer) if reward_model_tokenizer is not None else -1}


def by_kwargs(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": 1.0, "router": kwargs.get("reward_router_address") == "127.0.0.1:9"}


async def genrm_async(data_source, solution_str, ground_truth, extra_info=None, reward_router_address=None,
                      reward_model_tokenizer=None):
    return {"score": 1.0, "router": reward_router_address == "127.0.0.1:9",
            "rm_vocab": len(reward_model_tokenizer)}


def plain(data_source, solution_str, ground_truth, extra_info=None):
    return 0.5
"""


# ------------------------------------------------------------------------------------------- start-up
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((f"{RM}.enable=true",), r"reward.reward_model.enable=true with the bot manager needs \+reward.reward_kwargs"),
        ((*SERVED, "+reward.reward_kwargs.bot.prm.url=http://127.0.0.1:1"), r"needs \+reward.reward_kwargs.bot.prm"),
        ((*SERVED, *PRM, f"{RM}.enable_resource_pool=false"), "set reward.reward_model.enable_resource_pool=true"),
        ((*SERVED, *PRM, f"{RM}.rollout.name=sglang"), "needs reward.reward_model.rollout.name=vllm .*got sglang"),
        ((*SERVED, *PRM, f"{RM}.rollout.free_cache_engine=true"), "set reward.reward_model.rollout.free_cache_engine"),
        ((f"{RM}.rollout.name=vllm", *PRM), r"prm.url=router needs reward.reward_model.enable=true"),
        ((*SERVED, *PRM, "trainer.device=cpu"), r"enable_sleep_mode=false on the CPU: vLLM"),
    ],
)
def test_reward_model_configurations_that_cannot_work_are_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(VerlBotConfigError, match=message) as err:
        check_config(config(tmp_path, *BOT, *overrides))
    assert "\n" not in str(err.value)


def test_a_served_prm_and_a_genrm_function_pass(tmp_path, tiny_model_dir):
    """The PRM (its tag checked against the served model's tokenizer: here the policy's, which has no such
    token) and a GenRM function that calls the router."""
    served = (*SERVED, f"{RM}.model_path={tiny_model_dir}")  # (the last value wins)
    with pytest.raises(VerlBotConfigError, match=r"prm.step_tag '<extra_0>' is not one token of"):
        check_config(config(tmp_path, *BOT, *served, *PRM))
    check_config(config(tmp_path, *BOT, *served, *PRM, "+reward.reward_kwargs.bot.prm.step_tag='<|im_end|>'"))
    genrm = tmp_path / "genrm.py"
    genrm.write_text(GENRM_FN)
    check_config(config(tmp_path, *BOT, *served, f"reward.custom_reward_function.path={genrm}",
                        "reward.custom_reward_function.name=genrm"))


# --------------------------------------------------------------------------------- verl's reward loop
class FakeRouter:
    """verl's reward router as its reward-loop worker calls it: `/classify` answers one probability; every
    request is recorded."""

    def __init__(self):
        self.port, self.requests = free_port(), []
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/classify", self.classify)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def classify(self, request):
        self.requests.append(await request.json())
        return web.json_response({"data": [{"probs": [0.25]}]})

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def router():
    server = FakeRouter()
    yield server
    server.close()


def served_worker(tiny_model_dir, address, *extra):
    """verl's reward-loop worker of a run whose reward model verl serves (the tiny model as that model)."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    overrides = [f"actor_rollout_ref.model.path={tiny_model_dir}", *SERVED, f"{RM}.model_path={tiny_model_dir}",
                 *extra]
    return RewardLoopWorker(compose_verl_config(overrides), reward_router_address=address)


def test_verl_scores_its_own_managers_with_the_model_and_the_bot_manager_gets_every_rollout(
        tiny_model_dir, tokenizer, router):
    address = f"127.0.0.1:{router.port}"
    naive = served_worker(tiny_model_dir, address, "reward.reward_manager.name=naive")
    data, _ = make_batch(tokenizer, ["good text"], data_source="openai/gsm8k")
    (out,) = asyncio.run(naive.compute_score_batch(data))
    assert out == {"reward_score": 0.25} and len(router.requests) == 1  # verl's own path, unchanged

    bot = served_worker(tiny_model_dir, address, "reward.reward_manager.name=bot", "algorithm.adv_estimator=bot")
    data, rows = make_batch(tokenizer, ["good text", "hello world"])
    outputs = asyncio.run(bot.compute_score_batch(data))
    assert [len(o["reward_score"]) for o in outputs] == [len(r) for r in rows]  # the bot manager's dense rewards
    assert "clean" in outputs[0]["reward_extra_info"]  # a part of toy_lint's verdict
    assert len(router.requests) == 1  # the model was not asked


@pytest.mark.parametrize(
    ("name", "workers"),
    [("genrm", 1), ("genrm", 0), ("genrm_async", 1), ("by_kwargs", 0), ("plain", 0)],  # 1: a worker process
)
def test_a_genrm_function_gets_the_router_address_and_the_reward_model_tokenizer(
        tmp_path, tiny_model_dir, tokenizer, name, workers):
    path = tmp_path / "genrm.py"
    path.write_text(GENRM_FN)
    worker = served_worker(tiny_model_dir, "127.0.0.1:9", "reward.reward_manager.name=bot",
                           "algorithm.adv_estimator=bot", f"reward.custom_reward_function.path={path}",
                           f"reward.custom_reward_function.name={name}",
                           f"+reward.reward_kwargs.bot.fn_workers={workers}")
    try:
        data, _ = make_batch(tokenizer, ["two words"], data_source="anything")
        (out,) = asyncio.run(worker.compute_score_batch(data))
    finally:
        worker.reward_manager.verl_scorer.close()
    info = out["reward_extra_info"]
    assert info["scorer_failed"] == 0.0, info["scorer_error_msg"]
    if name == "plain":  # a function without the parameters is called as before
        assert info["score"] == 0.5 and "router" not in info
        return
    assert info["router"] == 1.0
    if name != "by_kwargs":
        assert info["rm_vocab"] == len(tokenizer)  # the reward model's tokenizer (here: the tiny model's)


def test_verls_vllm_server_skips_the_logits_patch_only_for_a_model_without_logits():
    """vLLM 0.27.1's step PRM has no `compute_logits` for verl's server to patch (its start-up would fail with an
    AttributeError); a generating model has one and gets verl's patch as before (tests/e2e/test_prm_served.py starts
    the PRM in verl's reward pool)."""
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
    from vllm.model_executor.models.qwen2_rm import Qwen2ForProcessRewardModel

    from verl_bot.hooks.vllm_pooling_model import samples_tokens

    assert not samples_tokens([Qwen2ForProcessRewardModel])
    assert samples_tokens([Qwen2ForCausalLM]) and not samples_tokens([Qwen2ForCausalLM, Qwen2ForProcessRewardModel])
