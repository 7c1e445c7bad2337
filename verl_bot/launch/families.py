"""The paper's three model families, in one place: what each one is, and the RoPE rule that keeps a run on-policy.

`FAMILIES` holds each family (`Family`: `qwen2`, `smollm3`, `phi3`): its model type, chat template, special tokens,
EOS list and output style, which the tiny CPU models (`verl_bot_demo.tiny_model`) are built from, so that the CPU
smokes run each family's own format. `longrope_problem` is the RoPE rule, checked at start-up for any model
(`verl_bot.launch.preflight`): a LongRoPE model with distinct short and long factors runs only with the long factors
on both sides (`longrope_copy`) or every sequence within the switch.

    python -m verl_bot.launch.families longrope-copy SRC DST    # SRC: a model folder or a hub id; prints DST

Each family and the rule: docs/families.md (its sections and LongRoPE).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_bot_contract.think import THINK_CLOSE, THINK_OPEN

QWEN2_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SMOLLM3_SYSTEM_THINK = (
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and "
    "accurate solutions."
)
SMOLLM3_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."
# SmolLM3-3B's template without its tool calls: a metadata system block with today's date and the reasoning mode
# (`enable_thinking`, default true, or /think and /no_think in a system message); in no-think mode every assistant
# turn, the generation prompt included, starts with an empty think block.
SMOLLM3_TEMPLATE = (
    "{%- if enable_thinking is not defined %}{%- set enable_thinking = true %}{%- endif %}"
    "{%- set reasoning_mode = '/think' if enable_thinking else '/no_think' %}"
    "{%- set custom_instructions = '' %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}"
    "{%- if '/no_think' in system_message %}{%- set reasoning_mode = '/no_think' %}"
    "{%- elif '/think' in system_message %}{%- set reasoning_mode = '/think' %}{%- endif %}"
    "{%- set custom_instructions = system_message.replace('/no_think', '').replace('/think', '').rstrip() %}"
    "{%- endif %}"
    "{{- '<|im_start|>system\\n## Metadata\\n\\nKnowledge Cutoff Date: June 2025\\n' }}"
    "{{- 'Today Date: ' + strftime_now('%d %B %Y') + '\\n' }}"
    "{{- 'Reasoning Mode: ' + reasoning_mode + '\\n\\n## Custom Instructions\\n\\n' }}"
    "{%- if custom_instructions %}{{- custom_instructions + '\\n\\n' }}"
    f"{{%- elif reasoning_mode == '/think' %}}{{{{- '{SMOLLM3_SYSTEM_THINK}\\n\\n' }}}}"
    f"{{%- else %}}{{{{- '{SMOLLM3_SYSTEM}\\n\\n' }}}}{{%- endif %}}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}"
    "{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{%- if reasoning_mode == '/think' %}"
    "{{- '<|im_start|>assistant\\n' + message['content'].lstrip('\\n') + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n' + message['content'].lstrip('\\n') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{%- if reasoning_mode == '/think' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n' }}{%- endif %}"
    "{%- endif %}"
)

PHI3_SYSTEM = "Your name is Phi, an AI math expert developed by Microsoft."
# Phi-4-mini-reasoning's template: its fixed system line (a system message of the chat is appended to it), then
# each turn as <|role|>content<|end|>; the generation prompt is <|assistant|>.
PHI3_TEMPLATE = (
    f"{{{{- '<|system|>{PHI3_SYSTEM}' }}}}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{{- ' ' + message['content'] }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|end|>' }}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{{- '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- else %}{{- eos_token }}{%- endif %}"
)


@dataclass(frozen=True)
class Family:
    """One model family: what a tokenizer, a config and a generation config of it hold, and how it answers.

    `end_of_turn` is the token its template writes after an assistant message (where a response ends);
    `generation_eos` its `generation_config.json` EOS list, which vLLM and transformers stop at; `thinks`: a
    response opens with a think block in the recipes' template mode (`recipe_template_kwargs`)."""

    name: str
    recipe_tag: str
    base_model: str
    model_type: str
    chat_template: str
    special_tokens: tuple[str, ...]
    eos_token: str
    pad_token: str
    bos_token: str | None
    end_of_turn: str
    generation_eos: tuple[str, ...]
    thinks: bool
    recipe_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    template_corpus: tuple[str, ...] = ()  # fixed template text a tiny tokenizer should learn

    def respond(self, thought: str, answer: str) -> str:
        """A response in this family's output style: `answer` alone, or after a think block holding `thought`."""
        if not self.thinks:
            return answer
        return f"{THINK_OPEN}\n{thought}\n{THINK_CLOSE}\n\n{answer}"


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="qwen2", recipe_tag="qwen", base_model="Qwen/Qwen2.5-3B-Instruct", model_type="qwen2",
            chat_template=QWEN2_TEMPLATE, special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
            eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, end_of_turn="<|im_end|>",
            generation_eos=("<|im_end|>", "<|endoftext|>"), thinks=False,
            template_corpus=("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",),
        ),
        Family(
            name="smollm3", recipe_tag="smollm", base_model="HuggingFaceTB/SmolLM3-3B", model_type="smollm3",
            chat_template=SMOLLM3_TEMPLATE,
            special_tokens=("<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>",
                            "<|finetune_right_pad_id|>"),
            eos_token="<|im_end|>", pad_token="<|finetune_right_pad_id|>", bos_token=None, end_of_turn="<|im_end|>",
            generation_eos=("<|im_end|>",), thinks=False,
            recipe_template_kwargs={"enable_thinking": False},
            template_corpus=("## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: 03 December 2026\n"
                             "Reasoning Mode: /no_think\n\n## Custom Instructions\n\n", SMOLLM3_SYSTEM,
                             SMOLLM3_SYSTEM_THINK),
        ),
        Family(
            name="phi3", recipe_tag="phi", base_model="microsoft/Phi-4-mini-reasoning", model_type="phi3",
            chat_template=PHI3_TEMPLATE,
            special_tokens=("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
            eos_token="<|endoftext|>", pad_token="<|endoftext|>", bos_token="<|endoftext|>", end_of_turn="<|end|>",
            generation_eos=("<|end|>", "<|endoftext|>"), thinks=True,
            template_corpus=(PHI3_SYSTEM,),
        ),
    )
}
BY_RECIPE_TAG = {f.recipe_tag: f for f in FAMILIES.values()}


# --------------------------------------------------------------------------------------------- LongRoPE
def rope_parameters(hf_config: Mapping[str, Any]) -> dict:
    """The RoPE parameters of a config.json dict: transformers 5 writes `rope_parameters`, older configs (the hub's
    Phi-4-mini among them) `rope_scaling`; {} when neither."""
    return dict(hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {})


def is_longrope(rope: Mapping[str, Any]) -> bool:
    """Whether RoPE parameters (`rope_parameters`) are LongRoPE's (`rope_type`, or the older `type`)."""
    return (rope.get("rope_type") or rope.get("type")) == "longrope"


def longrope_switch(hf_config: Mapping[str, Any]) -> int | None:
    """The sequence length above which a LongRoPE model rotates with its long factors, when its short and long
    factors differ; None for any other model (and for a LongRoPE model whose two factor lists are equal)."""
    rope = rope_parameters(hf_config)
    if not is_longrope(rope):
        return None
    if list(rope.get("short_factor") or []) == list(rope.get("long_factor") or []):
        return None
    return int(rope.get("original_max_position_embeddings") or hf_config["original_max_position_embeddings"])


def longrope_problem(hf_config: Mapping[str, Any], *, model: str, rollout: str, max_model_len: int | None,
                     max_sequence: int) -> str | None:
    """Why the rollout and the trainer would rotate a LongRoPE model's sequences with different factors, or None.

    `rollout`: verl's rollout engine name; `max_model_len`: its `actor_rollout_ref.rollout.max_model_len` (None:
    verl's default, the model's `max_position_embeddings`); `max_sequence`: the longest prompt + response the run
    trains on. vLLM and SGLang choose the factors once from their context length; transformers (the trainer, and
    the `hf` rollout) per forward pass from its longest sequence."""
    switch = longrope_switch(hf_config)
    if switch is None:
        return None
    if rollout == "hf":  # transformers switches inside a generation once it crosses the switch
        if max_sequence <= switch:
            return None  # short factors on both sides
        where = f"the hf rollout switches factors inside a generation that crosses it ({max_sequence} tokens)"
    else:
        context = max_model_len if max_model_len is not None else int(hf_config.get("max_position_embeddings") or 0)
        if context <= switch:
            return None  # no sequence exceeds the switch: short factors on both sides
        where = f"the {rollout} rollout rotates every sequence with the long factors (max_model_len {context})"
    return (
        f"actor_rollout_ref.model.path={model} uses LongRoPE with distinct short and long factors (switch at "
        f"{switch} tokens): {where}, while the trainer uses the short ones for every micro-batch of sequences "
        f"within {switch} tokens, so the rollout would sample another policy than the one trained; use a copy with "
        f"short_factor = long_factor (python -m verl_bot.launch.families longrope-copy {model} DIR, then "
        f"actor_rollout_ref.model.path=DIR; the Phi recipes do this), or keep every sequence within the switch "
        f"(data.max_prompt_length + data.max_response_length <= {switch} and "
        f"actor_rollout_ref.rollout.max_model_len={switch})"
    )


def read_hf_config(path: str) -> dict | None:
    """config.json of a local model folder, or of a hub id (from the local Hugging Face cache, else the hub when it
    answers within seconds); None when it cannot be read here (verl's own model load then reports it)."""
    local = Path(os.path.expanduser(path)) / "config.json"
    try:
        if local.is_file():
            return json.loads(local.read_text())
        if path.count("/") != 1 or path.startswith((".", "/", "~")):
            return None
        from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            return json.loads(Path(cached).read_text())
        if constants.HF_HUB_OFFLINE or not _reachable(constants.ENDPOINT):
            return None
        return json.loads(Path(hf_hub_download(path, "config.json")).read_text())
    except Exception:  # noqa: BLE001 - offline, gated, malformed: not ours to report
        return None


def _reachable(url: str, timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to `url`'s host opens (the hub client would retry a missing network for 25 s)."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port or 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def longrope_copy(src: str, dst: str | Path) -> Path:
    """A model folder `dst` that is `src` (a folder or a hub id) with `short_factor = long_factor`: each file of
    `src` linked, config.json rewritten. Idempotent; returns `dst`."""
    source = Path(os.path.expanduser(src))
    if not source.is_dir():
        from huggingface_hub import snapshot_download

        source = Path(snapshot_download(src))
    config = json.loads((source / "config.json").read_text())
    key = "rope_parameters" if config.get("rope_parameters") else "rope_scaling"
    rope = rope_parameters(config)
    if not is_longrope(rope):
        raise ValueError(f"{src}: not a LongRoPE model (rope {rope.get('rope_type') or rope.get('type')!r})")
    out = Path(dst)
    out.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        link = out / item.name
        if item.name != "config.json" and not link.exists():
            link.symlink_to(item.resolve())
    config[key] = {**rope, "short_factor": list(rope["long_factor"])}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_bot.launch.families", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("longrope-copy", help="SRC with short_factor = long_factor, at DST (files linked)")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--if-needed", action="store_true", help="only for LongRoPE with distinct factors (whose config "
                   "can be read here); else print SRC")
    args = parser.parse_args(argv)
    if args.if_needed and longrope_switch(read_hf_config(args.src) or {}) is None:
        print(args.src)
    else:
        print(longrope_copy(args.src, args.dst))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
