"""Shared fixtures: a tiny model + tokenizer built locally (no hub) and verl's own composed trainer config."""

import socket
import subprocess
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


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if name not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(name.removesuffix(".py")))

    def rank(item):
        name = item.path.name
        return FIRST.index(name) if name in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the order inside a module stays


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A directory with a tiny Qwen2 model and its byte-level BPE tokenizer (ChatML template)."""
    from verl_bot.cpu.tiny_model import build_model

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
