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
