"""verl's actor training engine in this process, built the way verl's worker builds it, and batches in its layout.

For tests and benchmarks that drive verl 0.9.1's real `FSDPEngineWithLMHead` (FSDP2, gloo) without Ray
or the trainer: `tests/component/test_grail_engine.py`, `benchmarks/grail_update.py`. Needs the CPU backend
selected (`VERL_PLATFORM=cpu` before verl is imported) on a machine without a GPU.

    init_process_group(port)                      # one rank, gloo
    engine, loss = build_actor_engine(model_dir)  # composed config -> ActorConfig -> EngineRegistry, initialize()
    batch = actor_batch(seqs, prompt_lens, ...)   # TensorDict as the worker gets it from TransferQueue
    engine.forward_backward_batch(batch, loss_function=loss)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def compose_trainer_config(overrides: Sequence[str]):
    """verl's `ppo_trainer` config composed by Hydra with `overrides`, as `python -m verl.trainer.main_ppo` sees it."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def init_process_group(port: int) -> None:
    """A one-rank gloo process group (what verl's worker has before it builds its engine)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)


def build_actor_engine(model_dir: str | Path, overrides: Sequence[str] = ()):
    """verl's actor engine and its bound `ppo_loss`, as `ActorRolloutRefWorker.init_model` makes them.

    The config is verl's composed trainer config with the CPU overrides (`verl_bot/cpu/overrides.txt`), the
    model path and `overrides` (e.g. `actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2`).
    Returns `(engine, loss_function)`; the engine is initialized (model, optimizer, FSDP2).
    """
    from functools import partial

    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine import EngineRegistry
    from verl.workers.utils.losses import ppo_loss

    from verl_bot.cpu import overrides as cpu_overrides

    cfg = compose_trainer_config([*cpu_overrides(), f"actor_rollout_ref.model.path={model_dir}", *overrides])
    model_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    actor_cfg.model_config = model_cfg
    model_cfg.model_type = "language_model"
    engine_cfg = actor_cfg.engine
    engine_cfg.use_remove_padding = model_cfg.use_remove_padding
    engine = EngineRegistry.new(
        model_type="language_model",
        backend=engine_cfg.strategy,
        model_config=model_cfg,
        engine_config=engine_cfg,
        optimizer_config=actor_cfg.optim,
        checkpoint_config=actor_cfg.checkpoint,
    )
    engine.initialize()
    return engine, partial(ppo_loss, config=actor_cfg)


def actor_batch(
    seqs: Sequence[torch.Tensor],
    prompt_lens: Sequence[int],
    advantages: Sequence[float],
    old_log_probs: Sequence[torch.Tensor],
    extra: dict[str, Sequence[torch.Tensor]] | None = None,
    non_tensor: dict[str, Any] | None = None,
    temperature: float = 1.0,
    micro_batch_size: int = 2,
    max_token_len: int = 4096,
    packed: bool = True,
    dynamic: bool = False,
    legacy: bool = False,
):
    """One actor (mini-)batch in the layout verl's worker gets it: fetched from TransferQueue (v1: every field
    nested), or sent by the legacy trainer (`legacy`: `RayPPOTrainer._update_actor`'s `DataProto`, prompts left- and
    responses right-padded, through `to_tensordict` and verl's `left_right_2_no_padding`: the sequences nested, every
    response-aligned field (B, T) right-padded).

    Args:
        seqs: per row, prompt + response token ids (1-D int64). prompt_lens: per row.
        advantages: per row, A_i on every response token. old_log_probs: per row, (response length,).
        extra: more response-aligned fields (e.g. GRAIL's span codes), per row.
        non_tensor: more non-tensor entries (what the trainer puts in `batch.extra_info`).
        temperature, micro_batch_size, max_token_len, packed (use_remove_padding), dynamic (use_dynamic_bsz):
            what verl's trainer and worker set on the batch.

    Returns:
        a TensorDict with `input_ids`, `position_ids`, `prompts`, `responses`, `response_mask`, `loss_mask`,
        `old_log_probs`, `advantages` (+ `extra`), and its non-tensor entries.
    """
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    resp = [s[p:] for s, p in zip(seqs, prompt_lens, strict=True)]
    rows = {"old_log_probs": list(old_log_probs),
            "advantages": [torch.full((len(r),), float(a)) for r, a in zip(resp, advantages, strict=True)],
            **{name: list(values) for name, values in (extra or {}).items()}}
    td = legacy_fields(seqs, prompt_lens, rows) if legacy else TensorDict(v1_fields(seqs, prompt_lens, rows),
                                                                            batch_size=len(seqs))
    tu.assign_non_tensor(
        td, temperature=temperature, global_batch_size=len(seqs), use_remove_padding=packed, use_dynamic_bsz=dynamic,
        micro_batch_size_per_gpu=micro_batch_size, max_token_len_per_gpu=max_token_len, calculate_entropy=False,
        **(non_tensor or {}),
    )
    return td


def v1_fields(seqs, prompt_lens, rows: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The sequences and the response-aligned `rows`, every field nested (jagged), as TransferQueue holds them."""

    def nested(values):
        return torch.nested.as_nested_tensor(list(values), layout=torch.jagged)

    ones = [torch.ones(len(s) - p, dtype=torch.long) for s, p in zip(seqs, prompt_lens, strict=True)]
    return {
        "input_ids": nested(seqs),
        "position_ids": nested(torch.arange(len(s)) for s in seqs),
        "prompts": nested(s[:p] for s, p in zip(seqs, prompt_lens, strict=True)),
        "responses": nested(s[p:] for s, p in zip(seqs, prompt_lens, strict=True)),
        "response_mask": nested(ones),
        "loss_mask": nested(ones),
        **{name: nested(values) for name, values in rows.items()},
    }


def legacy_fields(seqs, prompt_lens, rows: dict[str, list[torch.Tensor]]):
    """The sequences and `rows` as the legacy trainer's update sends them: a padded `DataProto`'s fields through
    verl's `left_right_2_no_padding`."""
    from tensordict import TensorDict
    from verl.workers.utils.padding import left_right_2_no_padding

    width_p, width_r = max(prompt_lens), max(len(s) - p for s, p in zip(seqs, prompt_lens, strict=True))
    b = len(seqs)
    prompts, responses = torch.zeros(b, width_p, dtype=torch.long), torch.zeros(b, width_r, dtype=torch.long)
    attention = torch.zeros(b, width_p + width_r, dtype=torch.long)
    padded = {name: torch.zeros(b, width_r, dtype=values[0].dtype) for name, values in rows.items()}
    for i, (s, p) in enumerate(zip(seqs, prompt_lens, strict=True)):
        n = len(s) - p
        prompts[i, width_p - p:], responses[i, :n] = s[:p], s[p:]
        attention[i, width_p - p: width_p + n] = 1
        for name, values in rows.items():
            padded[name][i, :n] = values[i]
    return left_right_2_no_padding(TensorDict(
        {"input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention,
         "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "prompts": prompts, "responses": responses,
         "response_mask": attention[:, width_p:].clone(), **padded}, batch_size=b))
