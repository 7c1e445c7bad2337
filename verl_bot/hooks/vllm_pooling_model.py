"""Hook: `verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension.monkey_patch_model` (verl's vLLM
server starts a pooling model: a step PRM as verl's reward model).

verl 0.9.1's vLLM server calls `monkey_patch_model` on every engine it starts (vllm_async_server.py:499-505), which
wraps each model's `compute_logits` to mask tokens the sampler must never pick (utils.py:107-138); a pooling model
has none (vLLM 0.27.1's `Qwen2ForProcessRewardModel` ends in a score head and samples nothing), and the reward
model's server died at start-up with `AttributeError: ... has no attribute 'compute_logits'`. The wrapper (in vLLM's
worker process) returns without patching such a model (nothing to mask, no weight to sync into it); every other
model goes through verl's method unchanged (docs/prm.md, section Through verl's reward-model path).
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
