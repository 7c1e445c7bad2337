"""Hook: `verl.workers.engine_workers.ppo_loss` (worker side: a verl-bot loss's knobs, active while it runs).

verl's `ppo_loss` selects the tensors a registered policy loss gets from the
micro-batch and drops the rest, including the `verl_bot_loss` knobs that
the trainer adapter shipped with the update (`verl_bot.training.actor_update`). The actor
worker binds this module global in `init_model` (`partial(ppo_loss,
config=actor_config)`), after verl-bot's plugin was loaded by the worker's
`import verl`. The wrapper reads the knobs from the micro-batch and makes them
`verl_bot.credit.context.loss_settings()` while verl's own `ppo_loss` runs, and adds
the loss metric `KNOBS_METRIC` (which `verl_bot.training.actor_update.update_metrics` requires of every update of a
verl-bot loss: a hook gone inert stops the run); without them it calls verl's
function untouched. Not covered: verl's distillation loss, which calls its own
reference to `ppo_loss` (the start-up checks refuse a verl-bot loss with distillation).
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
