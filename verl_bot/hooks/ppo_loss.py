"""Hook: `verl.workers.engine_workers.ppo_loss` (worker side: a verl-bot loss's knobs, active while it runs).

verl's `ppo_loss` drops what a registered policy loss does not take, the `verl_bot_loss` knobs the trainer adapter
shipped with the update (`verl_bot.training.actor_update`) included; the actor worker binds this module global in
`init_model`, after the worker's `import verl` loaded verl-bot. The wrapper makes the knobs
`verl_bot.credit.context.loss_settings()` while verl's `ppo_loss` runs and adds the loss metric `KNOBS_METRIC`
(every update of a verl-bot loss must report it: a hook gone inert stops the run); without knobs it calls verl's
function untouched. Not covered: verl's distillation loss (refused at start-up with a verl-bot loss).
"""

from __future__ import annotations

import functools

from verl_bot.credit.context import use_loss_settings
from verl_bot.hooks.wrap import wrap
from verl_bot.training.actor_update import KNOBS_METRIC, LOSS_KNOBS_KEY


def _make_ppo_loss(original):
    @functools.wraps(original)
    def ppo_loss(config, model_output, data, *args, **kwargs):
        from verl.utils import tensordict_utils as tu

        settings = tu.get_non_tensor_data(data, LOSS_KNOBS_KEY, None)
        if settings is None:
            return original(config, model_output, data, *args, **kwargs)
        from verl.utils.metric import AggregationType, Metric

        with use_loss_settings(dict(settings)):
            loss, metrics = original(config, model_output, data, *args, **kwargs)
        metrics[KNOBS_METRIC] = Metric(aggregation=AggregationType.MEAN, value=1.0)  # the knobs were active
        return loss, metrics

    return ppo_loss


def install() -> list[str]:
    from verl.workers import engine_workers

    return [wrap(engine_workers, "ppo_loss", ["config", "model_output", "data"], _make_ppo_loss)]
