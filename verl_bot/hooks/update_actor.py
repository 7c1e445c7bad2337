"""Hook: `verl.trainer.ppo.v1.trainer_base.PPOTrainer._update_actor` (a verl-bot loss's knobs travel with the update).

verl hands a registered policy loss only tensors and the actor's config, a
dataclass that refuses keys it does not know (so do `policy_loss` and every
other node under `actor`). A verl-bot loss therefore keeps its knobs in the
`algorithm` config (`+algorithm.<loss>_*`, e.g. `+algorithm.reco_rvar_cap`),
which only the trainer reads. Around verl's method, when
`actor_rollout_ref.actor.policy_loss.loss_mode` is one of verl-bot's losses:

1. put those knobs into the batch's `extra_info` under `verl_bot_loss`. verl
   sends `extra_info` to the actor workers with the update and every
   micro-batch carries it (as it carries `temperature`);
   `verl_bot.hooks.ppo_loss` makes it the active `loss_settings()` there;
2. after the update, move the loss's metrics from `actor/<loss>/...` (verl
   prefixes every actor metric) to `<loss>/...`, beside the estimator's.

Also, when either half of ReCo is on, add `reco/weights_on` and
`reco/token_ratio_on` (0/1) to the step's metrics: each half works alone.
"""

from __future__ import annotations

import functools

from verl_bot.hooks._patch import wrap
from verl_bot.losses import loss_knobs, loss_name
from verl_bot.losses.reco import pairing_metrics

EXTRA_INFO_KEY = "verl_bot_loss"


def _make_update_actor(original):
    @functools.wraps(original)
    def _update_actor(self, batch, metrics, *args, **kwargs):
        name = loss_name(self.config)
        if name is not None:
            batch.extra_info[EXTRA_INFO_KEY] = loss_knobs(self.config, name)
        result = original(self, batch, metrics, *args, **kwargs)
        if name is not None:
            prefix = f"actor/{name}/"
            for key in [k for k in metrics if k.startswith(prefix)]:
                metrics[key.removeprefix("actor/")] = metrics.pop(key)
        estimator = self.config.algorithm.adv_estimator
        loss_mode = self.config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
        metrics.update(pairing_metrics(str(getattr(estimator, "value", estimator)), str(loss_mode)))
        return result

    return _update_actor


def install() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_update_actor", ["self", "batch", "metrics"], _make_update_actor)]
