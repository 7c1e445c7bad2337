"""Shared fixtures: a tiny model + tokenizer built locally (no hub) and verl's own composed trainer config."""

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# `make test` runs the tests on two xdist workers (`-n 2 --dist loadgroup`): each module is one group (its module
# fixtures are built once, on one worker) except the end-to-end modules whose tests share nothing costly, whose
# tests spread over both; the longest modules go first, so that neither worker ends with a long one alone.
SPREAD = {"test_cpu_e2e.py"}
FIRST = ("test_recipes_cpu.py", "test_cpu_e2e.py", "test_e2e_resume.py", "test_e2e_verl_rewards.py",
         "test_legacy_trainer.py", "test_e2e_reco.py", "test_e2e_pass.py", "test_trainer_modes.py",
         "test_multi_output.py", "test_e2e_tool.py", "test_prm_served.py")


# `make test-fast` runs `-m "not slow"`: `slow` marks every test of e2e/ (each starts verl's trainer) and the tests
# named here (a module, or module::test), each of which takes more than seconds: the benchmarks, the recipes' launches,
# verl's driver or verl's own tests in a process of their own, a browser, a model's warm start.
SLOW = {
    "test_benchmarks.py", "test_families.py::test_evaluation_renders_the_prompt_the_recipes_rollout_rendered",
    "test_node_plan.py::test_each_node_reaches_the_urls_or_the_run_stops_naming_node_and_url",
    "test_node_plan.py::test_the_hook_checks_before_verls_init_on_several_nodes_only",
    "test_recipes.py", "test_recipe_supervision.py",
    "test_prm.py::test_the_aime_recipes_pass_a_prm_and_refuse_it_where_s_goes_nowhere",
    "test_toy_math.py::test_warm_start_is_deterministic_and_writes_the_format",
    "test_toy_math.py::test_the_aime_recipes_cpu_problems_are_the_data_scripts_and_have_answers_aime_py_reads",
    "test_toy_math.py::test_data_script_writes_verl_rows", "test_verl_own_tests.py", "test_touch_points.py",
    "test_plugin.py", "test_transfer_queue_hooks.py", "test_cpu_backend.py", "test_grail_engine.py",
    "test_console.py::test_other_entry_points_still_import_verl_first", "test_no_web_stack.py",
    "test_react_server.py", "test_server_fuzz.py",
    "test_run_safety.py::test_the_drivers_sigterm_is_ctrl_c_unless_the_process_has_its_own_handler",
    "test_verl_scorer.py::test_a_hung_call_is_killed_and_the_worker_replaced",
    "test_reward_model_path.py::test_a_genrm_function_gets_the_router_address_and_the_reward_model_tokenizer",
    "test_outages.py::test_a_killed_and_restarted_reward_server_costs_only_the_rollouts_scored_while_it_was_down",
}


@pytest.fixture(autouse=True)
def no_registered_legacy_trainer():
    """A test that registers a legacy trainer (`RayPPOTrainer.__init__`'s hook, or its own) leaves none behind: a
    process runs one trainer, and the next test's advantage calls would take it for their run's."""
    yield
    legacy = sys.modules.get("verl_bot.hooks.legacy.trainer")
    if legacy is not None:
        legacy._trainer.clear()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts verl's trainer or takes more than seconds (not in make test-fast)")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if name not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(name.removesuffix(".py")))
        if item.path.parent.name == "e2e" or {name, f"{name}::{item.originalname}"} & SLOW:
            item.add_marker(pytest.mark.slow)

    def rank(item):
        name = item.path.name
        return FIRST.index(name) if name in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order inside a module stays


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A directory with a tiny Qwen2 model and its byte-level BPE tokenizer (ChatML template)."""
    from verl_bot_demo.tiny_model import build_model

    out = tmp_path_factory.mktemp("tiny_model")
    build_model(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def compose_verl_config(overrides: list[str]):
    """verl's `ppo_trainer` config composed by Hydra with `overrides`, as `main_ppo` would see it."""
    from verl_bot.cpu.actor_engine import compose_trainer_config

    return compose_trainer_config(overrides)


def hf_server(model_dir: Path, response_length: int = 12, **rollout: object):
    """verl-bot's CPU rollout server (`HFRolloutServer`) in this process, serving the model at `model_dir`."""
    from omegaconf import OmegaConf
    from verl.workers.config import RolloutConfig

    from verl_bot.cpu.hf_rollout import HFRolloutServer

    cfg = RolloutConfig(name="hf", prompt_length=64, response_length=response_length, calculate_log_probs=True,
                        **rollout)
    model_cfg = OmegaConf.create({"path": str(model_dir), "override_config": {"attn_implementation": "sdpa"}})
    return HFRolloutServer(cfg, model_cfg)


def prompt_ids(server, text: str) -> list[int]:
    """The chat-formatted prompt ids of one user message, as verl's agent loop builds them."""
    ids = server.model_config.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, poll_s: float = 2.0) -> None:
    """Wait until `url` answers (any HTTP answer); RuntimeError if `proc` exits first, TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(poll_s)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")
