"""Sample responses from a Hugging Face model directory for the prompts of a verl parquet file.

The model directory is any HF causal LM (a verl checkpoint after ``python -m verl.model_merger merge ...``, a
hub snapshot, the tiny CPU model). Each prompt row's ``prompt`` chat list goes through the tokenizer's chat
template (with the generation prompt); ``n`` samples per prompt are drawn with plain temperature sampling
(``top_p``/``top_k`` only when asked; ``temperature`` 0 = greedy), in batches of ``batch_size`` sequences, left
padded. The random state is seeded once with ``seed``: the same model, file, settings, batch size and device give
the same rows.
"""

from __future__ import annotations

from pathlib import Path

from verl_bot.eval.records import EvalError


def _plain(value):
    """numpy scalars/arrays (as pandas reads parquet) -> Python values, recursively."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def user_text(messages: list[dict]) -> str:
    """The content of the last user message of a chat list ("" when there is none)."""
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return ""


def read_prompts(parquet: str | Path, limit: int | None = None) -> list[dict]:
    """Prompt records of a verl parquet file: ``{prompt_index, data_source, messages, prompt, ground_truth}``.

    ``prompt_index`` is the row number in the file; ``ground_truth`` comes from ``reward_model.ground_truth``
    (None when absent). ``limit``: only the first rows. Raises EvalError for a missing/unreadable file, no
    ``prompt`` column, a prompt that is not a chat list, or no rows.
    """
    import pandas as pd

    path = Path(parquet)
    if not path.is_file():
        raise EvalError(f"{path}: no such file")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - any reader failure is bad input
        raise EvalError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    if "prompt" not in df.columns:
        raise EvalError(f"{path}: no 'prompt' column (columns: {', '.join(map(str, df.columns))})")
    records = []
    for i, row in enumerate(df.head(limit).to_dict(orient="records") if limit else df.to_dict(orient="records")):
        messages = _plain(row["prompt"])
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
            raise EvalError(f"{path}: row {i}: 'prompt' is not a chat list of {{role, content}} messages")
        reward_model = _plain(row.get("reward_model")) or {}
        records.append(
            {
                "prompt_index": i,
                "data_source": _plain(row.get("data_source")),
                "messages": messages,
                "prompt": user_text(messages),
                "ground_truth": reward_model.get("ground_truth") if isinstance(reward_model, dict) else None,
            }
        )
    if not records:
        raise EvalError(f"{path}: no rows")
    return records


def load_model(model_dir: str | Path, device: str = "auto", dtype: str = "auto"):
    """(model in eval mode on ``device``, tokenizer with left padding). ``device`` "auto": cuda when available.

    ``dtype`` "auto": bfloat16 on cuda, float32 on CPU; else a torch dtype name ("float16", ...).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise EvalError(
            f"{path}: not a Hugging Face model directory (no config.json); merge a verl checkpoint "
            "first: python -m verl.model_merger merge --backend fsdp --local_dir ... --target_dir ..."
        )
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise EvalError(f"--dtype {dtype!r} is not a torch dtype (float32, bfloat16, float16)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    return model, tokenizer


def render_prompt(tokenizer, messages: list[dict], template_kwargs: dict | None = None) -> str:
    """The prompt text of a chat list as verl's rollout renders it: the chat template with the generation prompt
    and the run's template options (its system prompt is the template's, or the chat's own system message)."""
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                         **(template_kwargs or {}))


def generate(
    model,
    tokenizer,
    prompts: list[dict],
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int = 512,
    batch_size: int = 8,
    seed: int = 0,
    template_kwargs: dict | None = None,
) -> list[dict]:
    """Generation rows (see ``records.py``) for ``prompts`` from :func:`read_prompts`, ``n`` samples each.

    Rows are ordered by (prompt_index, sample_index). Each batch holds ``batch_size`` sequences: token ids
    (batch_size, prompt_len) left padded -> generated ids (batch_size, prompt_len + new); the response is the
    decoding of the new ids with special tokens (EOS, padding) skipped. ``template_kwargs``: the chat template's
    options, as training passed them (verl's ``data.apply_chat_template_kwargs``, e.g. SmolLM3's
    ``enable_thinking``): :func:`render_prompt`.
    """
    import torch
    from transformers import set_seed

    if n < 1 or batch_size < 1 or max_new_tokens < 1:
        raise EvalError("n, batch size and max new tokens must be >= 1")
    set_seed(seed)
    jobs = [(p, s) for p in prompts for s in range(n)]
    texts = {p["prompt_index"]: render_prompt(tokenizer, p["messages"], template_kwargs) for p in prompts}
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k}
    if temperature <= 0:
        sampling = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    device = next(model.parameters()).device
    rows = []
    for start in range(0, len(jobs), batch_size):
        batch = jobs[start : start + batch_size]
        enc = tokenizer(
            [texts[p["prompt_index"]] for p, _ in batch], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(device)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
        new_ids = out[:, enc["input_ids"].shape[1] :]
        for (p, s), ids in zip(batch, new_ids, strict=True):
            rows.append(
                {
                    "prompt_index": p["prompt_index"],
                    "sample_index": s,
                    "data_source": p["data_source"],
                    "prompt": p["prompt"],
                    "response": tokenizer.decode(ids, skip_special_tokens=True),
                    "ground_truth": p["ground_truth"],
                }
            )
    return rows


def generate_from_files(
    model_dir: str | Path,
    parquet: str | Path,
    *,
    limit: int | None = None,
    device: str = "auto",
    dtype: str = "auto",
    **sampling,
) -> list[dict]:
    """:func:`generate` for a model directory and a parquet file (``sampling``: generate's keyword arguments)."""
    prompts = read_prompts(parquet, limit)
    model, tokenizer = load_model(model_dir, device, dtype)
    return generate(model, tokenizer, prompts, **sampling)
