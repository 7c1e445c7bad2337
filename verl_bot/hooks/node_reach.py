"""Hook: the trainer's start (every node reaches the reward servers and judges): v1 `PPOTrainer.init`, legacy
`RayPPOTrainer.init_workers`.

verl's TaskRunner calls `init` (legacy: `init_workers`) once Ray is up and before it builds the workers, loads
the models and starts the rollout servers. For a run that uses verl-bot (`verl_bot.launch.activation`; any other run
gets verl's method as it is) on more than one node (`trainer.nnodes` > 1, or a Ray cluster of several alive
nodes), the wrapper first shows that every node reaches every reward server and judge of the run
(`verl_bot.launch.reach.check_nodes`, a Ray task per node); the first node that cannot reach one stops the run with
one line naming the node and the URL, minutes before a step would score its rollouts 0. On one node the recipes'
own pre-launch checks made the same calls from it.
"""

from __future__ import annotations

import functools
import logging

from verl_bot.hooks.wrap import wrap

logger = logging.getLogger("verl_bot")


def _make_init(original):
    @functools.wraps(original)
    def init(self, *args, **kwargs):
        from verl_bot.launch.activation import in_use

        if in_use(self.config):
            from verl_bot.launch.reach import check_nodes, several_nodes, targets

            urls = targets(self.config) if several_nodes(self.config) else {}
            if urls:
                nodes = check_nodes(urls)
                logger.info("verl-bot: each of %d node(s) reaches the run's %d reward server and judge URL(s)",
                            nodes, len(urls))
        return original(self, *args, **kwargs)

    return init


def install_v1() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "init", ["self"], _make_init)]


def install_legacy() -> list[str]:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    return [wrap(RayPPOTrainer, "init_workers", ["self"], _make_init)]
