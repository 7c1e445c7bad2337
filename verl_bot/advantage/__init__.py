"""Advantage estimators: pure tensor functions, one module per method, registered in verl here."""

from __future__ import annotations


def register_estimators() -> list[str]:
    """Register verl-bot's estimators with `verl.trainer.ppo.core_algos.register_adv_est`; returns their names.

    An estimator that reads named reward streams (`verl_bot.streams`) also declares them here.
    """
    from verl.trainer.ppo import core_algos

    from verl_bot.advantage import pure
    from verl_bot.advantage.bot import compute_bot_advantage
    from verl_bot.streams import declare_streams

    estimators = {"bot": compute_bot_advantage, "pure": pure.compute_pure_advantage}
    declare_streams("pure", pure.STREAMS)
    for name, fn in estimators.items():
        core_algos.register_adv_est(name)(fn)
    return sorted(estimators)
