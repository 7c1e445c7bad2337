"""Shared fixtures: a tiny model + tokenizer built locally (no hub) and verl's own composed trainer config."""

from pathlib import Path

import pytest


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
