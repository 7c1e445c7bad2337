"""Advantage estimators: pure tensor functions, one module per method, registered in verl here."""

from __future__ import annotations


def register_estimators() -> list[str]:
    """Register verl-bot's estimators with `verl.trainer.ppo.core_algos.register_adv_est`; returns their names."""
    from verl.trainer.ppo import core_algos

    from verl_bot.advantage.bot import compute_bot_advantage

    estimators = {"bot": compute_bot_advantage}
    for name, fn in estimators.items():
        core_algos.register_adv_est(name)(fn)
    return sorted(estimators)
