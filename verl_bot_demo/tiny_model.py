"""A tiny Qwen2-style causal LM and a byte-level BPE tokenizer, built locally (no model hub is reachable here).

    python -m verl_bot_demo.tiny_model OUT_DIR [--warm-start toy_math|toy_calc|toy_turns] [--family qwen2|smollm3|phi3]

Without options: the `toy_lint` model, a randomly initialised `Qwen2ForCausalLM` of a few layers and a byte-level BPE
tokenizer (every string round-trips) with a ChatML template (`CHATML_TEMPLATE`). `--warm-start TASK`: a tokenizer
that knows the task's tags as single tokens and a short deterministic supervised pre-training on its worked
solutions (docs/cpu_demo.md, each task's section). `--family`: a tiny model of that family, as the recipes' CPU
smokes run them (docs/families.md). The tiny step PRM has its own command: `verl_bot_demo.tiny_prm`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from verl_bot.launch.families import BY_RECIPE_TAG, FAMILIES, Family, is_longrope
from verl_bot_contract.think import THINK_CLOSE, THINK_OPEN

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WARM_STARTS = (None, "toy_math", "react", "toy_calc", "toy_turns")

_CORPUS = [
    "You are a helpful assistant. Write a short answer.",
    "const App = () => { return <div className=\"p-4\">Hello</div>; };",
    "export default function Counter() { const [n, setN] = useState(0); }",
    "import React from 'react'; function Button(props) { return <button>{props.label}</button>; }",
    "<step 1> Let x = 3. </step 1> <step 2> Then 2x = 6. </step 2> <final>6</final>",
    "The answer is \\boxed{33}. 0 1 2 3 4 5 6 7 8 9 10 100 999",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "good bad good bad ok fine great poor yes no",
    "caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \U0001f600 \u2014 \u00e9t\u00e9",
    "{}[]()<>;:,.!?'\"`~@#$%^&*-_=+|\\/\n\t",
]


def build_tokenizer(
    out_dir: str | Path,
    vocab_size: int = 400,
    extra_corpus: Sequence[str] = (),
    tags: Sequence[str] = (),
    family: Family | None = None,
):
    """Train a byte-level BPE tokenizer on a small built-in corpus (plus `extra_corpus`) and save it.

    `tags`: strings added as single (non-special) tokens, so decoding keeps them. `family`: its special tokens,
    EOS/pad/BOS, chat template (whose fixed text the BPE learns) and think tags as tokens of their own; None: the
    toy tasks' ChatML. Returns the `transformers.PreTrainedTokenizerFast`; `out_dir` then loads with
    `AutoTokenizer.from_pretrained(out_dir)`.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = list(family.special_tokens) if family else SPECIAL_TOKENS
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    template_text = list(family.template_corpus) * 4 if family else []
    tok.train_from_iterator(_CORPUS * 4 + template_text + list(extra_corpus), trainer=trainer)
    named = {
        "bos_token": family.bos_token if family else None,
        "eos_token": family.eos_token if family else "<|im_end|>",
        "pad_token": family.pad_token if family else "<|endoftext|>",
    }
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=None,
        additional_special_tokens=[t for t in special if t not in named.values()],
        **named,
    )
    fast.chat_template = family.chat_template if family else CHATML_TEMPLATE
    words = [*tags, *((THINK_OPEN, THINK_CLOSE) if family else ())]
    if words:
        fast.add_tokens([AddedToken(t, normalized=False, special=False) for t in words])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    return fast


def build_model(
    out_dir: str | Path,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    num_heads: int = 2,
    max_positions: int = 8192,
    warm_start: str | None = None,
    warm_start_kwargs: dict | None = None,
    prompts: str | Path | None = None,
    family: str | None = None,
):
    """Write a tokenizer and a tiny causal LM to `out_dir`: randomly initialised from `seed`, then pre-trained by a
    warm start: `"toy_math"` on that task (`verl_bot_demo.toy_math.warm_start(**warm_start_kwargs)`; with `prompts`,
    a verl parquet of toy_math problems in another wording, in that wording), `"react"` on the chat prompts of the
    verl parquet `prompts`, answered with components (`verl_bot_demo.toy_react.warm_start`). `family` (a key of
    `verl_bot.launch.families.FAMILIES`): that family's architecture, tokenizer, generation config and output style, the
    prompts rendered with the recipes' template options; None: the toy tasks' Qwen2 and ChatML."""
    import torch

    fam = FAMILIES[family] if family is not None else None
    if warm_start not in WARM_STARTS:
        raise ValueError(f"warm start must be one of {WARM_STARTS}, got {warm_start!r}")
    if warm_start == "toy_math":
        from verl_bot_demo import toy_math

        template = toy_math.prompt_template_of(prompts) if prompts is not None else None
        corpus = toy_math.tokenizer_corpus() + ([template] if template is not None else [])
        tokenizer = build_tokenizer(out_dir, extra_corpus=corpus, tags=toy_math.TAG_TOKENS, family=fam)
    elif warm_start in ("toy_calc", "toy_turns"):
        from verl_bot_demo import toy_calc, toy_turns

        tool_task = toy_calc if warm_start == "toy_calc" else toy_turns
        tokenizer = build_tokenizer(out_dir, extra_corpus=tool_task.tokenizer_corpus(), tags=tool_task.TAG_TOKENS,
                                    family=fam)
    elif warm_start == "react":
        from verl_bot_demo import toy_react

        if prompts is None:
            raise ValueError("the react warm start needs the prompts it answers (a verl parquet: prompts=...)")
        texts = toy_react.prompts(prompts)
        tokenizer = build_tokenizer(out_dir, extra_corpus=toy_react.tokenizer_corpus(texts), family=fam)
    else:
        tokenizer = build_tokenizer(out_dir, family=fam)
    torch.manual_seed(seed)
    model = tiny_model(fam, tokenizer, hidden_size, num_layers, num_heads, max_positions)
    summary = {"family": family, "hidden_size": hidden_size, "layers": model.config.num_hidden_layers,
               "heads": num_heads, "seed": seed}
    if warm_start is not None:
        from transformers import AutoTokenizer

        # train on the tokenizer exactly as verl will load it: with config.json next to it, transformers picks
        # its Qwen2 tokenizer class, whose pre-tokenizer splits text differently from the one trained above
        model.config.save_pretrained(out_dir)  # (rewritten by `save` below)
        tokenizer = AutoTokenizer.from_pretrained(out_dir)
        kwargs = {**(_style(fam, tokenizer) if fam else {}), **(warm_start_kwargs or {})}
        if warm_start == "toy_math":
            if template is not None:
                kwargs = {"prompt_template": template, **kwargs}
            summary["warm_start"] = toy_math.warm_start(model, tokenizer, seed=seed, **kwargs)
        elif warm_start in ("toy_calc", "toy_turns"):
            summary["warm_start"] = tool_task.warm_start(model, tokenizer, seed=seed, **kwargs)
        else:
            summary["warm_start"] = toy_react.warm_start(model, tokenizer, texts, seed=seed, **kwargs)
    save(model, out_dir)
    if fam is not None:
        _generation_config(fam, tokenizer).save_pretrained(out_dir)
    (Path(out_dir) / "verl_bot_tiny.json").write_text(json.dumps(summary))
    return model, tokenizer


LONGROPE_SWITCH = 256  # the tiny Phi's original_max_position_embeddings (Phi-4-mini: 4096), within the smokes' lengths
NOPE_INTERVAL = 4  # SmolLM3: every 4th layer has no rotary embedding


def tiny_model(family: Family | None, tokenizer, hidden_size: int, num_layers: int, num_heads: int,
               max_positions: int):
    """A randomly initialised tiny causal LM of `family`'s architecture class (None: the toy tasks' Qwen2).

    SmolLM3 gets at least `NOPE_INTERVAL` layers (so that one is NoPE); Phi-3 gets LongRoPE with short factors 1
    and long factors rising to 32 (a rotary dimension of 3/4 of the head), switching at `LONGROPE_SWITCH`, and a
    context 32 times that, as Phi-4-mini's 131072 / 4096. The Phi model rotates with the long factors at every
    length while it is warm-started (as vLLM serves it, and as the recipes' copy trains it: a model that crosses
    the switch inside a generation would learn two rotations for one text); `save` writes its distinct factors."""
    from transformers import (
        Phi3Config,
        Phi3ForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        SmolLM3Config,
        SmolLM3ForCausalLM,
    )

    common = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": max(1, num_heads // 2),
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "torch_dtype": "float32",
    }
    name = family.name if family else None
    if name == "smollm3":
        layers = max(num_layers, NOPE_INTERVAL)
        return SmolLM3ForCausalLM(SmolLM3Config(
            **{**common, "num_hidden_layers": layers}, bos_token_id=None, no_rope_layer_interval=NOPE_INTERVAL,
            rope_theta=5e6, max_position_embeddings=max_positions))
    if name == "phi3":
        rotary = int(hidden_size // num_heads * 0.75) // 2
        return Phi3ForCausalLM(Phi3Config(
            **common, bos_token_id=tokenizer.bos_token_id, partial_rotary_factor=0.75,
            original_max_position_embeddings=LONGROPE_SWITCH, max_position_embeddings=32 * LONGROPE_SWITCH,
            rope_scaling={"rope_type": "longrope", "short_factor": _long_factors(rotary),
                          "long_factor": _long_factors(rotary)}))
    return Qwen2ForCausalLM(Qwen2Config(**common, bos_token_id=tokenizer.pad_token_id,
                                        max_position_embeddings=max_positions))


def _long_factors(rotary: int) -> list[float]:
    """The tiny Phi's long factors: 1 rising to 32 over its `rotary` frequencies."""
    return [round(32 ** (i / (rotary - 1)), 4) for i in range(rotary)]


def save(model, out_dir: str | Path) -> None:
    """`model.save_pretrained(out_dir)`; a LongRoPE model with its short factors 1 (distinct from its long ones)."""
    rope = getattr(model.config, "rope_parameters", None) or {}
    if is_longrope(rope):
        rope["short_factor"] = [1.0] * len(rope["long_factor"])
    model.save_pretrained(out_dir)


def _generation_config(family: Family, tokenizer):
    """The family's generation_config.json: its EOS list, as vLLM and transformers stop at."""
    from transformers import GenerationConfig

    eos = [tokenizer.convert_tokens_to_ids(t) for t in family.generation_eos]
    return GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)


def _style(family: Family, tokenizer) -> dict:
    """What a warm start needs of the family: the recipes' template options, where a response ends, its output
    style."""
    return {"template_kwargs": dict(family.recipe_template_kwargs),
            "end_token_id": tokenizer.convert_tokens_to_ids(family.end_of_turn), "family": family}


def warm_start_kwargs(args: argparse.Namespace) -> dict:
    """The warm start's settings given on the command line (the others keep its defaults)."""
    given = {"steps": args.warm_steps, "batch_size": args.warm_batch}
    return {k: v for k, v in given.items() if v is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2, help="attention heads (key/value heads: half); vLLM's CPU "
                        "attention needs hidden-size / heads >= 32")
    parser.add_argument("--seed", type=int, default=0, help="initialisation (and warm-start) seed")
    parser.add_argument("--warm-start", choices=[w for w in WARM_STARTS if w], default=None)
    parser.add_argument("--prompts", default=None, help="the verl parquet whose prompts the warm start answers "
                        "(react: needed; toy_math: its problems' wording, e.g. the AIME recipes')")
    parser.add_argument("--warm-steps", type=int, default=None, help="warm-start optimizer steps (its default)")
    parser.add_argument("--warm-batch", type=int, default=None, help="warm-start batch size (its default)")
    parser.add_argument("--family", choices=sorted(FAMILIES) + sorted(BY_RECIPE_TAG), default=None,
                        help="a tiny model of this family (verl_bot.launch.families; or a recipe's MODEL_TAG: "
                        "qwen, smollm, "
                        "phi); default: the toy tasks' Qwen2")
    args = parser.parse_args()
    if (Path(args.out_dir) / "verl_bot_tiny.json").exists():
        print(f"reusing tiny model in {args.out_dir}")
        return
    build_model(args.out_dir, args.hidden_size, args.layers, seed=args.seed, num_heads=args.heads,
                warm_start=args.warm_start, prompts=args.prompts, warm_start_kwargs=warm_start_kwargs(args),
                family=BY_RECIPE_TAG[args.family].name if args.family in BY_RECIPE_TAG else args.family)
    print(f"wrote tiny model to {args.out_dir}")


if __name__ == "__main__":
    main()
