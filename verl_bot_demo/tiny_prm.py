"""A tiny step process reward model (PRM) in the layout vLLM serves as `Qwen2ForProcessRewardModel`, and its
reference implementation.

    python -m verl_bot_demo.tiny_prm OUT_DIR [--seed N]

`build_prm` writes it (random weights: the scores mean nothing, but they are the PRM's); `reference_step_probabilities`
recomputes them with transformers' `Qwen2Model` and the same head, so a test can check what vLLM served to the
float32 rounding. Qwen2.5-Math-PRM's default `step_tag_id` (151651) is outside this vocabulary: serve it with
`--pooler-config '{"step_tag_id": ID}'` (`step_tag_id(OUT_DIR)`). Its use: docs/prm.md.
"""

from __future__ import annotations

import json
from pathlib import Path

STEP_TAG = "<extra_0>"
ARCHITECTURE = "Qwen2ForProcessRewardModel"
# a random tiny transformer at the usual init (0.02) passes each token's embedding through nearly unchanged, so every
# step tag (the same token) would get the same score: a wider init mixes in the context, and a gain on the output
# layer spreads the probabilities (seed 0: p_good from about 0.1 to 0.7, both signs of 2q - 1)
INIT_RANGE = 0.5
HEAD_GAIN = 3.0


def build_prm(out_dir: str | Path, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 2,
              seed: int = 0) -> dict:
    """Write the tiny PRM (tokenizer, config.json, model.safetensors) to `out_dir`; returns its summary.

    Laid out as Qwen2.5-Math-PRM, scaled down: a Qwen2 backbone (`model.*`), a two-layer head `score` =
    Linear(H, H), ReLU, Linear(H, 2) (`score.0.*`, `score.2.*`, biases included: vLLM 0.27.1's
    `vllm/model_executor/models/qwen2_rm.py`, which sets two labels itself), `architectures:
    ["Qwen2ForProcessRewardModel"]` in `config.json`, and the toy tasks' tokenizer (toy_math's text and tags learned)
    plus the step tag `<extra_0>` as one special token. The weights are random (seeded).
    """
    import torch
    from safetensors.torch import save_file
    from tokenizers import AddedToken
    from transformers import Qwen2Config, Qwen2Model

    from verl_bot_demo import toy_math
    from verl_bot_demo.tiny_model import build_tokenizer

    out = Path(out_dir)
    tokenizer = build_tokenizer(out, extra_corpus=toy_math.tokenizer_corpus(), tags=toy_math.TAG_TOKENS)
    tokenizer.add_tokens([AddedToken(STEP_TAG, normalized=False, special=True)], special_tokens=True)
    tokenizer.save_pretrained(out)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=8192, tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.pad_token_id, torch_dtype="float32",
        architectures=[ARCHITECTURE], initializer_range=INIT_RANGE,
    )
    torch.manual_seed(seed)
    backbone = Qwen2Model(config)
    head = _head(hidden_size)
    with torch.no_grad():
        head[2].weight.mul_(HEAD_GAIN)
    tensors = {f"model.{k}": v.contiguous() for k, v in backbone.state_dict().items()}
    tensors.update({f"score.{k}": v.contiguous() for k, v in head.state_dict().items()})
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    summary = {"prm": ARCHITECTURE, "hidden_size": hidden_size, "layers": num_layers, "heads": num_heads,
               "seed": seed, "step_tag": STEP_TAG, "step_tag_id": tokenizer.convert_tokens_to_ids(STEP_TAG)}
    (out / "verl_bot_tiny.json").write_text(json.dumps(summary))
    return summary


def _head(hidden_size: int):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(hidden_size, hidden_size), torch.nn.ReLU(),
                               torch.nn.Linear(hidden_size, 2))


def step_tag_id(model_dir: str | Path) -> int:
    """The step tag's token id in the PRM of `model_dir` (what vLLM's `pooler_config.step_tag_id` must be)."""
    from transformers import AutoTokenizer

    return int(AutoTokenizer.from_pretrained(str(model_dir)).convert_tokens_to_ids(STEP_TAG))


def load_reference(model_dir: str | Path):
    """(transformers' `Qwen2Model`, the `score` head) of the PRM in `model_dir`, float32, eval mode."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, Qwen2Model

    config = AutoConfig.from_pretrained(str(model_dir))
    config._attn_implementation = "eager"
    weights = load_file(str(Path(model_dir) / "model.safetensors"))
    backbone = Qwen2Model(config).float().eval()
    backbone.load_state_dict({k[len("model."):]: v for k, v in weights.items() if k.startswith("model.")})
    head = _head(config.hidden_size).float().eval()
    head.load_state_dict({k[len("score."):]: v for k, v in weights.items() if k.startswith("score.")})
    return backbone, head


def reference_step_probabilities(reference, input_ids: list[int], tag_id: int) -> list[list[float]]:
    """The PRM's [p_bad, p_good] at each step tag of `input_ids`, as vLLM's step pooling returns them.

    reference: `load_reference(...)`. input_ids: (T,) the PRM's full input. Returns (n_tags, 2): softmax over the
    head's two logits, at the positions t where input_ids[t] == tag_id, in order."""
    import torch

    backbone, head = reference
    ids = torch.tensor([input_ids], dtype=torch.long)
    with torch.no_grad():
        hidden = backbone(input_ids=ids).last_hidden_state[0]  # (T, H)
        probs = torch.softmax(head(hidden), dim=-1)  # (T, 2)
    return probs[ids[0] == tag_id].tolist()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Build the tiny step PRM (Qwen2ForProcessRewardModel) in OUT_DIR.")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    summary = build_prm(args.out_dir, seed=args.seed)
    print(f"wrote tiny PRM to {args.out_dir} (serve it with pooler_config step_tag_id={summary['step_tag_id']})")


if __name__ == "__main__":
    main()
