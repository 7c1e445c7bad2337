"""Hook: the trainer's `fit` and `verl.utils.tracking.FileLogger.__init__` (a resumed run keeps its metrics file).

verl's `FileLogger` opens `VERL_FILE_LOGGER_PATH` (or `$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`) with
mode "wb" (`verl/utils/tracking.py`, verl 0.9.1), so a run resumed from its checkpoint (`trainer.resume_mode=auto`,
verl's default) erased the metrics of every iteration before the resume. For a run that uses verl-bot (any other
gets verl's methods as they are) the `fit` wrapper records the step it resumes from, and the `FileLogger` wrapper
writes back, at the head of the file verl has just truncated, the old lines up to it; later lines (trained again)
and a line cut short by the kill are dropped. What a resume carries: docs/long_runs.md, section Resume.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any

from verl_bot.hooks.wrap import wrap
from verl_bot.launch.activation import in_use

logger = logging.getLogger("verl_bot")
_resumed_at: list[int] = []  # the step this process's trainer resumed from (empty: not a resumed verl-bot run)


def file_logger_path(project_name: str, experiment_name: str) -> str:
    """The path verl 0.9.1's `FileLogger` writes (its `__init__`, before it opens the file)."""
    path = os.getenv("VERL_FILE_LOGGER_PATH")
    if path is None:
        root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
        path = os.path.join(root, project_name, f"{experiment_name}.jsonl")
    return path


def lines_through(path: str, step: int) -> bytes:
    """The complete JSON lines of `path` whose "step" is at most `step`, in file order (b"" without a file)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines(keepends=True)
    except FileNotFoundError:
        return b""
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # cut short by the kill
        if line.endswith(b"\n") and isinstance(record, dict) and isinstance(record.get("step"), int) \
                and record["step"] <= step:
            kept.append(line)
    return b"".join(kept)


def note_resumed_step(step: int) -> None:
    """This process's trainer resumes from `step` (0: a fresh run): the `FileLogger` then keeps the lines up to it."""
    _resumed_at[:] = [step] if step > 0 else []


def legacy_resume_step(config: Any) -> int:
    """The step verl's legacy `RayPPOTrainer._load_checkpoint` resumes from, read as it reads it (0: none).

    The legacy trainer opens its `FileLogger` in `fit` before it loads the checkpoint, so its `fit` wrapper
    (`verl_bot.hooks.legacy.trainer`) notes this step first; verl's v1 trainer loads the checkpoint before `fit`,
    whose `global_steps` is then the resumed step (`_make_fit`).
    """
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    trainer = config.trainer
    if trainer.resume_mode == "disable":
        return 0
    if trainer.resume_mode == "resume_path":
        folder = str(trainer.resume_from_path)
    else:
        folder = find_latest_ckpt_path(os.path.abspath(str(trainer.default_local_dir)))
    return int(str(folder).split("global_step_")[-1]) if folder and "global_step_" in str(folder) else 0


def _make_fit(original):
    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        if in_use(self.config):
            note_resumed_step(int(getattr(self, "global_steps", 0) or 0))
        return original(self, *args, **kwargs)

    return fit


def _make_file_logger_init(original):
    @functools.wraps(original)
    def __init__(self, project_name, experiment_name, *args, **kwargs):
        kept = lines_through(file_logger_path(project_name, experiment_name), _resumed_at[0]) if _resumed_at else b""
        original(self, project_name, experiment_name, *args, **kwargs)
        if kept:
            self.fp.write(kept)
            logger.info("verl-bot: resumed at step %d: %d metric lines of the steps before it kept in %s",
                        _resumed_at[0], kept.count(b"\n"), self.filepath)

    return __init__


def install_v1() -> list[str]:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [wrap(PPOTrainer, "fit", ["self", "agent_loop_manager"], _make_fit)]


def install_file_logger() -> list[str]:
    from verl.utils.tracking import FileLogger

    return [wrap(FileLogger, "__init__", ["self", "project_name", "experiment_name"], _make_file_logger_init)]
