"""The plugin imports no reward server and no web framework: in a fresh process where `fastapi`, `uvicorn`,
`starlette` and `reward_servers` cannot be imported (a `sys.meta_path` finder refuses them before `import verl`),
verl loads verl-bot, its registration succeeds, and verl's own reward loop scores rows with the `bot` manager and a
`python:` scorer. The built-in scorers (`verl_bot_demo.scorers`) stay unloaded while no row names them.

The same process shows why `fastapi` and `uvicorn` are still core requirements of verl-bot (pyproject.toml): verl
0.9.1's agent loop, which both of its trainers import, needs them."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import importlib.abc
import sys

REFUSED = ("fastapi", "uvicorn", "starlette", "reward_servers")


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"refused by the test: {name}", name=name)
        return None


sys.meta_path.insert(0, Refuse())

import asyncio
import json

import numpy as np
import torch
from tensordict import TensorDict
from transformers import AutoTokenizer

from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

import verl_bot.plugin
from verl_bot.cpu.actor_engine import compose_trainer_config


def score(prompt, response, ground_truth, extra_info):
    """G = 0.5; S = -1 on every character of the response."""
    return {"global": {"score": 0.5, "parts": {}}, "local": [{"start": 0, "end": len(response), "value": -1.0}]}


model = sys.argv[1]
config = compose_trainer_config([
    f"actor_rollout_ref.model.path={model}", "reward.reward_manager.name=bot", "algorithm.adv_estimator=bot",
    "+reward.reward_kwargs.bot.scorers.mine=python:__main__:score",
])
worker = RewardLoopWorker(config)
tokenizer = AutoTokenizer.from_pretrained(model)
prompt = tokenizer("Write.", add_special_tokens=False)["input_ids"]
response = tokenizer("hello world", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
batch = TensorDict({"prompts": torch.tensor([prompt]), "responses": torch.tensor([response]),
                    "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long)}, batch_size=1)
rows = {"data_source": ["mine"], "reward_model": [{"ground_truth": None}], "extra_info": [{"index": 0}],
        "raw_prompt": [[{"role": "user", "content": "Write."}]], "uid": ["g0"]}
data = DataProto(batch=batch, non_tensor_batch={k: np.array(v, dtype=object) for k, v in rows.items()})
(out,) = asyncio.run(worker.compute_score_batch(data))

found = {
    "rewards": out["reward_score"],
    "tokens": len(response),
    "scorer_failed": out["reward_extra_info"]["scorer_failed"],
    "registration_failure": verl_bot.plugin.register().failure,
    "manager": get_reward_manager_cls("bot").__module__,
    "estimator": get_adv_estimator_fn("bot").__module__,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in REFUSED or m == "verl_bot_demo.scorers"),
}
for name in ("fastapi", "reward_servers.math"):  # the finder refuses what it should
    try:
        __import__(name)
        found[name] = "imported"
    except ModuleNotFoundError as exc:
        found[name] = str(exc)
try:  # why fastapi and uvicorn are core requirements: verl's agent loop imports them
    import verl.experimental.agent_loop  # noqa: F401
    found["agent_loop"] = "imported"
except ModuleNotFoundError as exc:
    found["agent_loop"] = str(exc)
print(json.dumps(found))
'''


@pytest.fixture(scope="module")
def found(tiny_model_dir, tmp_path_factory):
    script = tmp_path_factory.mktemp("no_web_stack") / "probe.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    done = subprocess.run([sys.executable, str(script), str(tiny_model_dir)], capture_output=True, text=True,
                          env=env, timeout=300, cwd=script.parent)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_finder_refuses_the_web_stack_and_the_servers(found):
    assert found["fastapi"] == "refused by the test: fastapi"
    assert found["reward_servers.math"] == "refused by the test: reward_servers"


def test_verl_loads_verl_bot_and_its_manager_scores_without_them(found):
    assert found["registration_failure"] is None
    assert found["manager"] == "verl_bot.rewards.manager" and found["estimator"] == "verl_bot.advantage.bot"
    # r_t = w_g * G + w_s * S_t (both weights 1): 0.5 - 1 on each token of "hello world", G alone on the EOS
    assert found["scorer_failed"] == 0.0
    assert found["rewards"] == [-0.5] * (found["tokens"] - 1) + [0.5]


def test_nothing_of_the_web_stack_the_servers_or_the_built_in_scorers_was_loaded(found):
    assert found["loaded"] == []


def test_verls_agent_loop_needs_the_web_stack_which_is_why_it_stays_a_core_requirement(found):
    assert found["agent_loop"].startswith("refused by the test: "), found["agent_loop"]
    assert found["agent_loop"].split(": ")[1] in ("fastapi", "uvicorn"), found["agent_loop"]
