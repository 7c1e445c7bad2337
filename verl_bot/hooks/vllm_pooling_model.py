"""Hook: `verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension.monkey_patch_model` (verl's vLLM
server starts a pooling model: a step PRM as verl's reward model).

verl 0.9.1's vLLM server calls `monkey_patch_model` on every engine it starts, the reward model's included
(vllm_async_server.py:499-505). It wraps each model's `compute_logits` to mask tokens the sampler must never pick
(utils.py:107-138), and a pooling model has no `compute_logits`: vLLM 0.27.1's `Qwen2ForProcessRewardModel`
(vllm/model_executor/models/qwen2_rm.py) ends in a score head and samples nothing, so the reward model's
server dies at start-up with `AttributeError: ... has no attribute 'compute_logits'`.

The wrapper (inside vLLM's worker process): when one of the engine's models has no `compute_logits`, there is
nothing to mask and no weight to sync into it, and it returns without patching; every model verl could start
before (each has `compute_logits`) goes through verl's method unchanged, so a run that does not serve a pooling
model sees no difference.
"""

from __future__ import annotations

import functools

from verl_bot.hooks.wrap import wrap


def samples_tokens(models) -> bool:
    """True when every model of the engine has a `compute_logits` (a generating model, not a pooling one)."""
    return all(hasattr(model, "compute_logits") for model in models)


def _make_wrapper(original):
    @functools.wraps(original)
    def monkey_patch_model(self, vocab_size, *args, **kwargs):
        if samples_tokens(self._iter_all_models()):
            return original(self, vocab_size, *args, **kwargs)
        return None

    return monkey_patch_model


def install() -> str:
    from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

    return wrap(vLLMColocateWorkerExtension, "monkey_patch_model", ["self", "vocab_size"], _make_wrapper)
