"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._update_actor` (what verl-bot losses and GRAIL need there).

A run that does not use verl-bot (`verl_bot.launch.activation`) gets verl's method as it is.

A. verl-bot's policy losses (`verl_bot.step.actor_update`): the loss's knobs go into the batch's `extra_info`
(verl sends it to the actor workers with the update and every micro-batch carries it, as it carries
`temperature`); after the update, the step's metrics are named (`update_metrics`).

B. GRAIL (`algorithm.adv_estimator=grail`): answer spans and knobs for the update.

1. each response of the batch (`responses` from TransferQueue) is decoded with
   the trainer's tokenizer, its answer span found in the text
   (`verl_bot.advantage.grail.answer_span`) and mapped to tokens with the exact
   char<->token mapping of `verl_bot.credit.spans.token_char_spans` (no
   re-encoding); the per-token codes go to TransferQueue as the nested field
   `verl_bot_grail_span`;
2. verl's method runs on a copy of the batch meta that names that field too
   (the worker fetches the fields the meta names) and carries the GRAIL knobs
   in `extra_info` (key `verl_bot_grail`): like verl's own `temperature`, they
   reach every actor micro-batch as non-tensor data, where
   `verl_bot.hooks.engine_forward_step` computes the weights. The caller keeps
   its own batch meta;
3. after the update, the worker's GRAIL metrics are moved to the step's
   `grail/...` keys. verl prefixes the worker's metrics with `actor/` and
   averages them over the update's mini-batches; a key containing "max" would
   be maxed instead, so the worker reports the share of tokens at w_max as
   `w_cap_share` and it is logged here as `grail/w_max_share`. The saliency
   time (summed over each mini-batch's micro-batches) is multiplied by the
   number of mini-batches: `grail/saliency_s` is per step. `grail/span_s` is the
   time of step 1.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import torch

from verl_bot.advantage.grail import SETTINGS_KEY, SPAN_FIELD, GrailSettings, answer_span, span_codes
from verl_bot.credit.spans import token_char_spans
from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use
from verl_bot.step.actor_update import LOSS_KNOBS_KEY, loss_update_knobs, update_metrics

ESTIMATOR = "grail"
# worker metric (after verl's `actor/` prefix) -> step metric
STEP_METRICS = {
    "actor/grail/w_mean": "grail/w_mean",
    "actor/grail/w_cap_share": "grail/w_max_share",
    "actor/grail/answer_rate": "grail/answer_rate",
    "actor/grail/reweighted_rate": "grail/reweighted_rate",
    "actor/grail/saliency_s": "grail/saliency_s",
}


def response_span_codes(tokenizer: Any, responses: list[torch.Tensor], answer: str) -> list[torch.Tensor]:
    """(n_i,) int8 span codes of each response's token ids (`verl_bot.advantage.grail.span_codes`).

    The text is the tokenizer's decoding (special tokens skipped), as the reward reads it; only a response
    with an answer span goes through the token-by-token mapping.
    """
    codes = []
    for ids in responses:
        ids = ids.tolist()
        span = answer_span(tokenizer.decode(ids, skip_special_tokens=True), answer)
        if span is None:
            codes.append(torch.zeros(len(ids), dtype=torch.int8))
            continue
        text, char_spans = token_char_spans(tokenizer, ids)
        codes.append(torch.from_numpy(span_codes(char_spans, answer_span(text, answer))))
    return codes


def _grail_batch(trainer: Any, batch: Any, settings: GrailSettings) -> Any:
    """The batch meta for the update: span codes written to TransferQueue and named, knobs in `extra_info`."""
    import transfer_queue as tq
    from tensordict import TensorDict

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
    codes = response_span_codes(trainer.tokenizer, list(data["responses"].unbind()), settings.answer)
    field = torch.nested.as_nested_tensor(codes, layout=torch.jagged)
    tq.kv_batch_put(
        keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict({SPAN_FIELD: field}, batch_size=len(codes))
    )
    # the worker fetches the fields the batch meta names (all of them when it names none)
    fields = None if batch.fields is None else [*dict.fromkeys([*batch.fields, SPAN_FIELD])]
    extra_info = {**(batch.extra_info or {}), SETTINGS_KEY: settings.as_dict()}
    return dataclasses.replace(batch, fields=fields, extra_info=extra_info)


def mini_batches_per_step(config: Any, rows: int) -> int:
    """How many actor mini-batches verl's update runs for a batch of `rows` rollouts (all epochs)."""
    actor = config.actor_rollout_ref.actor
    per_mini = int(actor.ppo_mini_batch_size) * int(config.actor_rollout_ref.rollout.n)
    return max(rows // per_mini, 1) * int(actor.ppo_epochs)


def _make_update_actor(original):
    @functools.wraps(original)
    def _update_actor(self, batch, metrics, *args, **kwargs):
        if not in_use(self.config):
            return original(self, batch, metrics, *args, **kwargs)
        knobs = loss_update_knobs(self.config)
        estimator = str(getattr(self.config.algorithm.adv_estimator, "value", self.config.algorithm.adv_estimator))
        if knobs is not None:
            batch.extra_info[LOSS_KNOBS_KEY] = knobs
        update_batch, span_s = batch, None
        if estimator == ESTIMATOR:
            start = time.perf_counter()
            update_batch = _grail_batch(self, batch, GrailSettings.from_config(self.config.algorithm))
            span_s = time.perf_counter() - start
        result = original(self, update_batch, metrics, *args, **kwargs)
        if result is update_batch:  # verl returns the batch it got: hand back the caller's
            result = batch
        update_metrics(self.config, metrics)
        if span_s is not None:
            _grail_metrics(self.config, metrics, rows=len(batch.keys), span_s=span_s)
        return result

    return _update_actor


def _grail_metrics(config: Any, metrics: dict, rows: int, span_s: float) -> None:
    """The worker's GRAIL metrics under their step names; saliency time per step; span time."""
    for worker_key, step_key in STEP_METRICS.items():
        if worker_key in metrics:
            metrics[step_key] = float(metrics.pop(worker_key))
    if "grail/saliency_s" in metrics:
        metrics["grail/saliency_s"] *= mini_batches_per_step(config, rows)
    metrics["grail/span_s"] = span_s


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_update_actor", ["self", "batch", "metrics"], _make_update_actor)]
