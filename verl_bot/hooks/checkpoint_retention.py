"""Hook: the trainer's `_save_checkpoint` (the last checkpoints only, across resumes), on both trainers (v1
`PPOTrainer`, legacy `RayPPOTrainer`: the same method and meaning).

verl keeps `trainer.max_actor_ckpt_to_keep` checkpoints, but counts only those its checkpoint manager wrote in this
process (`CheckpointManager.previous_saved_paths` starts empty): a run resumed after a stop never removes the
checkpoints of its earlier launches, and a week of preemptions fills the disk one checkpoint a restart. For a run
that uses verl-bot (`verl_bot.launch.activation`; any other run gets verl's method as it is) with a limit set, after
verl's save
the wrapper removes every `global_step_<n>` folder of `trainer.default_local_dir` but the newest
`max_actor_ckpt_to_keep` (verl's own retention removes only their `actor` subfolder), so that a resumed run keeps
what one never stopped keeps. Never the one just saved, which `latest_checkpointed_iteration.txt` names; nothing
with `async_save` (the save may still be under way).
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
from pathlib import Path

from verl_bot.hooks.wrap import wrap

logger = logging.getLogger("verl_bot")
STEP_DIR = re.compile(r"global_step_(\d+)$")


def stale_checkpoints(root: Path, keep: int) -> list[Path]:
    """The `global_step_<n>` folders of `root` older than its newest `keep`."""
    steps = sorted((int(m.group(1)), p) for p in root.glob("global_step_*") if p.is_dir()
                   and (m := STEP_DIR.search(p.name)))
    return [p for _, p in steps[: max(len(steps) - keep, 0)]]


def _make_save(original):
    @functools.wraps(original)
    def _save_checkpoint(self, *args, **kwargs):
        from verl_bot.launch.activation import in_use

        result = original(self, *args, **kwargs)
        trainer = self.config.trainer
        keep = trainer.get("max_actor_ckpt_to_keep", None)
        checkpoint = self.config.actor_rollout_ref.actor.get("checkpoint", {}) or {}
        if in_use(self.config) and keep and int(keep) > 0 and not checkpoint.get("async_save", False):
            for path in stale_checkpoints(Path(trainer.default_local_dir), int(keep)):
                shutil.rmtree(path, ignore_errors=True)
                logger.info("verl-bot: removed %s (keeping the last %d checkpoints)", path, int(keep))
        return result

    return _save_checkpoint


def install_v1() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "_save_checkpoint", ["self"], _make_save)]


def install_legacy() -> list[str]:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    return [wrap(RayPPOTrainer, "_save_checkpoint", ["self"], _make_save)]
