"""A tiny Qwen2-style causal LM and a byte-level BPE tokenizer, built locally.

No model hub is reachable on the machines this project is tested on, so the
tests, the CPU demo and the benchmarks build their model here: a tokenizer
trained with `tokenizers` on a small corpus (byte-level BPE, so every string,
multi-byte UTF-8 included, round-trips), wrapped as a
`transformers.PreTrainedTokenizerFast` with a ChatML chat template, and a
randomly initialised `Qwen2ForCausalLM` of a few layers.

    python -m verl_bot.cpu.tiny_model OUT_DIR   # writes both, idempotent
    python -m verl_bot.cpu.tiny_model OUT_DIR --warm-start toy_math

`--warm-start toy_math`: a tokenizer that also learned the `toy_math` task's text and knows its step/final tags as
single tokens, and a short supervised pre-training on the task's worked solutions (`verl_bot.cpu.toy_math`),
so the model writes the format but makes mistakes (deterministic for the seed, single-threaded: about 2 minutes).
Without it the model and tokenizer are the `toy_lint` ones, unchanged.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WARM_STARTS = (None, "toy_math", "react")

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
    out_dir: str | Path, vocab_size: int = 400, extra_corpus: Sequence[str] = (), tags: Sequence[str] = ()
):
    """Train a byte-level BPE tokenizer on a small built-in corpus (plus `extra_corpus`) and save it.

    `tags`: strings added as single (non-special) tokens, so decoding keeps them. Returns the
    `transformers.PreTrainedTokenizerFast`; `out_dir` then loads with `AutoTokenizer.from_pretrained(out_dir)`.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS * 4 + list(extra_corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    if tags:
        fast.add_tokens([AddedToken(t, normalized=False, special=False) for t in tags])
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
):
    """Write a tokenizer and a tiny `Qwen2ForCausalLM` to `out_dir`: randomly initialised from `seed`, then
    pre-trained by a warm start: `"toy_math"` on that task (`verl_bot.cpu.toy_math.warm_start(**warm_start_kwargs)`;
    with `prompts`, a verl parquet of toy_math problems in another wording, in that wording), `"react"` on the chat
    prompts of the verl parquet `prompts`, answered with components (`verl_bot.cpu.toy_react.warm_start`)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if warm_start not in WARM_STARTS:
        raise ValueError(f"warm start must be one of {WARM_STARTS}, got {warm_start!r}")
    if warm_start == "toy_math":
        from verl_bot.cpu import toy_math

        template = toy_math.prompt_template_of(prompts) if prompts is not None else None
        corpus = toy_math.tokenizer_corpus() + ([template] if template is not None else [])
        tokenizer = build_tokenizer(out_dir, extra_corpus=corpus, tags=toy_math.TAG_TOKENS)
    elif warm_start == "react":
        from verl_bot.cpu import toy_react

        if prompts is None:
            raise ValueError("the react warm start needs the prompts it answers (a verl parquet: prompts=...)")
        texts = toy_react.prompts(prompts)
        tokenizer = build_tokenizer(out_dir, extra_corpus=toy_react.tokenizer_corpus(texts))
    else:
        tokenizer = build_tokenizer(out_dir)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    summary = {"hidden_size": hidden_size, "layers": num_layers, "heads": num_heads, "seed": seed}
    if warm_start is not None:
        from transformers import AutoTokenizer

        # train on the tokenizer exactly as verl will load it: with config.json next to it, transformers picks
        # its Qwen2 tokenizer class, whose pre-tokenizer splits text differently from the one trained above
        config.save_pretrained(out_dir)
        tokenizer = AutoTokenizer.from_pretrained(out_dir)
        kwargs = warm_start_kwargs or {}
        if warm_start == "toy_math":
            if template is not None:
                kwargs = {"prompt_template": template, **kwargs}
            summary["warm_start"] = toy_math.warm_start(model, tokenizer, seed=seed, **kwargs)
        else:
            summary["warm_start"] = toy_react.warm_start(model, tokenizer, texts, seed=seed, **kwargs)
    model.save_pretrained(out_dir)
    (Path(out_dir) / "verl_bot_tiny.json").write_text(json.dumps(summary))
    return model, tokenizer


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
    args = parser.parse_args()
    if (Path(args.out_dir) / "verl_bot_tiny.json").exists():
        print(f"reusing tiny model in {args.out_dir}")
        return
    build_model(args.out_dir, args.hidden_size, args.layers, seed=args.seed, num_heads=args.heads,
                warm_start=args.warm_start, prompts=args.prompts, warm_start_kwargs=warm_start_kwargs(args))
    print(f"wrote tiny model to {args.out_dir}")


if __name__ == "__main__":
    main()
