"""The model families (verl_bot/launch/families.py) and their tiny CPU models (verl_bot_demo/tiny_model.py).

Each tiny model is its family's real architecture class with the traits that matter (SmolLM3's NoPE layer, Phi's
LongRoPE with distinct factors and partial rotary), its family's chat format and EOS list. The LongRoPE rule is
shown on the tiny Phi with transformers itself: a sequence's logits depend on whether a longer one shares its
forward pass (the trainer's packed micro-batches), unless the short factors are the long ones (`longrope_copy`);
and a run whose rollout and trainer would disagree is refused before Ray starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import compose_verl_config
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch import families
from verl_bot.launch.families import FAMILIES, longrope_copy, longrope_problem
from verl_bot_demo.tiny_model import LONGROPE_SWITCH, build_model

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Compute 3+4."}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    out = {}
    for name in FAMILIES:
        build_model(root / name, family=name)
        out[name] = root / name
    return out


def test_each_tiny_model_is_its_familys_architecture_with_its_traits(tiny):
    from transformers import AutoConfig, AutoModelForCausalLM

    classes = {"qwen2": "Qwen2ForCausalLM", "smollm3": "SmolLM3ForCausalLM", "phi3": "Phi3ForCausalLM"}
    for name, path in tiny.items():
        config = AutoConfig.from_pretrained(path)
        assert config.model_type == FAMILIES[name].model_type
        assert type(AutoModelForCausalLM.from_config(config)).__name__ == classes[name]
    smollm = AutoConfig.from_pretrained(tiny["smollm3"])
    assert smollm.no_rope_layers == [1, 1, 1, 0]  # the 4th layer has no rotary embedding
    phi = json.loads((tiny["phi3"] / "config.json").read_text())
    rope = families.rope_parameters(phi)
    assert rope["rope_type"] == "longrope" and phi["partial_rotary_factor"] == 0.75
    assert len(rope["short_factor"]) == len(rope["long_factor"]) == 12  # head 32 x 0.75 / 2
    assert rope["short_factor"] != rope["long_factor"]
    assert families.longrope_switch(phi) == LONGROPE_SWITCH


@pytest.mark.parametrize(
    "name, starts, ends, eos",
    [
        ("qwen2", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>",
         "<|im_start|>user\nCompute 3+4.<|im_end|>\n<|im_start|>assistant\n", ["<|im_end|>", "<|endoftext|>"]),
        ("smollm3", "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: ",
         "<|im_start|>user\nCompute 3+4.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n", ["<|im_end|>"]),
        ("phi3", "<|system|>Your name is Phi, an AI math expert developed by Microsoft.<|end|>",
         "<|user|>Compute 3+4.<|end|><|assistant|>", ["<|end|>", "<|endoftext|>"]),
    ],
)
def test_each_tiny_tokenizer_renders_its_familys_format_and_stops_at_its_eos(tiny, name, starts, ends, eos):
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny[name])
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False,
                                         **FAMILIES[name].recipe_template_kwargs)
    assert text.startswith(starts) and text.endswith(ends), text
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text  # every marker is one token that decodes to itself
    for marker in FAMILIES[name].special_tokens:
        assert len(tokenizer(marker, add_special_tokens=False)["input_ids"]) == 1, marker
    generation = GenerationConfig.from_pretrained(tiny[name])
    assert generation.eos_token_id == tokenizer.convert_tokens_to_ids(eos)
    if name != "qwen2":  # think tags: tokens of their own that a decode keeps (they are not special)
        think = tokenizer("<think>\nx\n</think>", add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(think, skip_special_tokens=True) == "<think>\nx\n</think>"


def test_smollm3_renders_its_think_mode_when_thinking_is_on(tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny["smollm3"])
    think = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    no_think = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False,
                                             enable_thinking=False)
    assert "Reasoning Mode: /think" in think and think.endswith("<|im_start|>assistant\n")
    assert "Reasoning Mode: /no_think" in no_think and no_think.endswith("<think>\n\n</think>\n")


def _logits(model, ids: list[list[int]]) -> torch.Tensor:
    """Logits of right-padded rows in one forward pass (the longest row sets every row's RoPE factors)."""
    width = max(len(r) for r in ids)
    batch = torch.tensor([r + [0] * (width - len(r)) for r in ids])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids])
    with torch.no_grad():
        return model(input_ids=batch, attention_mask=mask).logits


def test_longrope_logits_depend_on_a_packed_neighbour_unless_the_short_factors_are_the_long_ones(tiny, tmp_path):
    """transformers picks LongRoPE's factors from the longest sequence of a forward pass: the same short sequence
    gets other logits beside a sequence past the switch (the trainer's packed micro-batches; vLLM, whose context
    exceeds the switch, always uses the long factors). The copy whose short factors are the long ones gives every
    sequence the long-factor logits, alone or packed."""
    from transformers import AutoModelForCausalLM

    short = [5 + i % 50 for i in range(100)]  # within the switch (256)
    long = [7 + i % 50 for i in range(LONGROPE_SWITCH + 40)]
    original = AutoModelForCausalLM.from_pretrained(tiny["phi3"]).eval()
    alone = _logits(original, [short])[0]
    packed = _logits(original, [short, long])[0, : len(short)]
    assert (alone - packed).abs().max() > 1e-3  # short factors alone, long ones beside the long sequence

    copy = longrope_copy(str(tiny["phi3"]), tmp_path / "copy")
    assert (copy / "model.safetensors").is_symlink()
    rope = families.rope_parameters(json.loads((copy / "config.json").read_text()))
    assert rope["short_factor"] == rope["long_factor"] and families.longrope_switch(json.loads(
        (copy / "config.json").read_text())) is None
    consistent = AutoModelForCausalLM.from_pretrained(copy).eval()
    assert torch.allclose(_logits(consistent, [short])[0], packed, atol=1e-5)
    assert torch.allclose(_logits(consistent, [short, long])[0, : len(short)], packed, atol=1e-5)
    assert longrope_copy(str(tiny["phi3"]), tmp_path / "copy") == copy  # again: the same folder


PHI = {"max_position_embeddings": 8192, "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.0],
                                                         "long_factor": [1.0, 2.0]},
       "original_max_position_embeddings": 256}  # the hub's older layout: rope_scaling, the switch at the top


@pytest.mark.parametrize(
    "config, rollout, max_model_len, max_sequence, refused",
    [
        (PHI, "vllm", None, 200, True),  # verl's default context, 8192: vLLM long, the trainer short at 200
        (PHI, "vllm", 1024, 200, True),
        (PHI, "vllm", 256, 256, False),  # every sequence within the switch: short on both sides
        (PHI, "hf", None, 256, False),  # transformers on both sides, never past the switch
        (PHI, "hf", None, 300, True),  # transformers switches inside a generation that crosses it
        ({**PHI, "rope_scaling": {**PHI["rope_scaling"], "short_factor": [1.0, 2.0]}}, "vllm", None, 9000, False),
        ({"max_position_embeddings": 32768, "rope_parameters": {"rope_type": "default"}}, "vllm", None, 9000, False),
        ({}, "vllm", None, 9000, False),
    ],
)
def test_the_longrope_rule(config, rollout, max_model_len, max_sequence, refused):
    problem = longrope_problem(config, model="m", rollout=rollout, max_model_len=max_model_len,
                               max_sequence=max_sequence)
    assert (problem is not None) == refused, problem
    if refused:
        assert problem.startswith("actor_rollout_ref.model.path=m uses LongRoPE with distinct short and long factors "
                                  "(switch at 256 tokens)")
        assert "python -m verl_bot.launch.families longrope-copy m DIR" in problem


def _bot_config(model: Path, *extra: str):
    from verl_bot.cpu import overrides

    return compose_verl_config([
        *overrides(), f"actor_rollout_ref.model.path={model}", "algorithm.adv_estimator=bot",
        "reward.reward_manager.name=bot", "+reward.reward_kwargs.bot.token_level=true",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "data.max_prompt_length=96",
        "data.max_response_length=160", *extra,
    ])


def test_preflight_refuses_a_longrope_run_whose_engines_disagree_and_takes_the_consistent_ones(tiny, tmp_path):
    """verl-bot's start-up checks (what the driver runs before Ray): the tiny Phi as it is, on verl's vLLM rollout
    with its default context, is refused in one line; its `longrope_copy`, or every sequence within the switch,
    passes."""
    from verl_bot.launch.preflight import check_config, rope_problem

    with pytest.raises(VerlBotConfigError, match=r"uses LongRoPE with distinct short and long factors \(switch at "
                                                 r"256 tokens\): the vllm rollout rotates every sequence with the "
                                                 r"long factors \(max_model_len 8192\)"):
        check_config(_bot_config(tiny["phi3"]))
    assert rope_problem(_bot_config(longrope_copy(str(tiny["phi3"]), tmp_path / "copy"))) is None
    within = _bot_config(tiny["phi3"], "actor_rollout_ref.rollout.max_model_len=256", "data.max_prompt_length=96",
                         "data.max_response_length=160")
    assert rope_problem(within) is None
    assert rope_problem(_bot_config(tiny["qwen2"])) is None


def test_the_cli_copies_only_what_needs_it(tiny, tmp_path):
    def run(src: Path) -> str:
        out = subprocess.run([sys.executable, "-m", "verl_bot.launch.families", "longrope-copy", "--if-needed",
        str(src),
                              str(tmp_path / src.name)], capture_output=True, text=True, check=True)
        return out.stdout.strip()

    assert run(tiny["qwen2"]) == str(tiny["qwen2"])
    assert run(tiny["phi3"]) == str(tmp_path / "phi3")


@pytest.mark.parametrize("recipe", ["react_qwen", "aime_smollm", "react_smollm", "aime_phi"])
def test_evaluation_renders_the_prompt_the_recipes_rollout_rendered(tiny, recipe):
    """`python -m verl_bot.eval generate --recipe R` renders each prompt as R's rollout does: verl's own prompt
    builder (its agent loop's Continuous Token builder) with R's composed config gives the same token ids as
    evaluation's `render_prompt` with R's settings, and the response length is R's. Without the settings SmolLM3
    would be evaluated in think mode, a prompt training never showed it."""
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from verl_bot.eval.generate import render_prompt
    from verl_bot.eval.recipe import recipe_args, recipe_settings

    family = families.BY_RECIPE_TAG[recipe.split("_")[1]]
    tokenizer = AutoTokenizer.from_pretrained(tiny[family.name])
    config = compose_verl_config(recipe_args(recipe)[2:])
    settings = recipe_settings(recipe)
    assert settings["max_new_tokens"] == config.data.max_response_length
    builder = create_continuous_token_builder(tokenizer, hf_model_type=family.model_type,
                                              chat_template_kwargs=config.data.get("apply_chat_template_kwargs", {}))
    chat = [{"role": "user", "content": "Solve <step 1> ... Problem: 3+4."}]
    verl_ids = list(builder.build_initial_tokens(chat))
    ours = tokenizer(render_prompt(tokenizer, chat, settings["template_kwargs"]), add_special_tokens=False)
    assert ours["input_ids"] == verl_ids
    if family.name == "smollm3":
        assert settings["template_kwargs"] == {"enable_thinking": False}
        default = tokenizer(render_prompt(tokenizer, chat), add_special_tokens=False)["input_ids"]
        assert default != verl_ids  # think mode: what evaluation rendered before it read the recipe
