"""What a paper recipe makes when it is missing: the data files (React's from the prompt set the repository ships; on
the CPU platform AIME's too, from its toy problems), the CPU platform's tiny policy and judge models, the LongRoPE
copy of a model whose short and long factors differ (Phi-4-mini-reasoning), and the link from OUT_DIR/ckpt to the
checkpoints outside the repository.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from verl_bot.launch.families import longrope_copy, longrope_switch, read_hf_config
from verl_bot.recipes.compose import files
from verl_bot.recipes.env import ROOT, Refusal
from verl_bot.recipes.settings import TINY_JUDGE, Run

STDERR = 2  # the process's stderr (its file descriptor)
TINY_MARK = "verl_bot_tiny.json"  # what verl_bot_demo.tiny_model writes into a model it built


def _quiet(argv: list[str], env: Mapping[str, str]) -> bool:
    """Run a preparation, its output on stderr (stdout is the dry run's); True when it succeeded."""
    return subprocess.run(argv, env=dict(env), stdout=STDERR).returncode == 0


def prepare_data(run: Run, env: Mapping[str, str]) -> None:
    """The default data files when missing: React's always, AIME's on the CPU platform (aime_cpu.jsonl)."""
    train, val = f"{run.data_dir}/train.parquet", f"{run.data_dir}/test.parquet"
    if (run.train_files, run.val_files) != (train, val) or (os.path.isfile(train) and os.path.isfile(val)):
        return
    task = run.recipe.task
    if task.name == "react":
        argv = [run.py, f"{ROOT}/recipes/data/react.py"]
    elif run.cpu:
        argv = [run.py, f"{ROOT}/recipes/data/aime.py", "--input", f"{ROOT}/recipes/data/aime_cpu.jsonl"]
    else:
        return
    if not _quiet([*argv, "--out-dir", run.data_dir], env):
        raise Refusal(f"could not write the {task.name} data to {run.data_dir}")


def prepare_models(run: Run, env: Mapping[str, str]) -> None:
    """The CPU platform's tiny models when missing (not for a dry run, which composes only): the policy at the
    default MODEL_PATH, of the recipe's family, warm-started on the run's own train prompts (React) or on toy_math
    problems in the AIME wording; the judge at the tiny judge's path, when the recipe starts it."""
    if not run.cpu or run.dry_run != "0":
        return
    if run.model_path == run.cpu_model_default and not Path(run.model_path, TINY_MARK).is_file():
        # AIME: toy_math in the recipe's wording, ~170-token prompts: 500 x 16 (~2 min on 2 cores) writes the <final>
        # format in 62 of 64 answers; Phi thinks first: 800 x 16 (~3 min) closes the think block in 57 of 64
        steps = "800" if run.recipe.family.thinks else "500"
        warm = (["--warm-start", "react"] if run.recipe.task.name == "react"
                else ["--warm-start", "toy_math", "--warm-steps", steps, "--warm-batch", "16"])
        argv = [run.py, "-m", "verl_bot_demo.tiny_model", run.model_path, "--seed", run.cpu_seed, "--family",
                run.recipe.family.recipe_tag, *warm, "--prompts", files(run.train_files)[0]]
        if not _quiet(argv, env):
            raise Refusal(f"could not build the tiny model at {run.model_path}")
    judge = run.judges[0].model
    if 0 in run.started and judge == str(TINY_JUDGE) and not Path(judge, TINY_MARK).is_file():
        if not _quiet([run.py, "-m", "verl_bot_demo.tiny_model", judge, "--seed", "1"], env):
            raise Refusal("could not build the tiny judge model")


def prepare_longrope(run: Run) -> Run:
    """LONGROPE=long: a LongRoPE model with distinct factors trains as a copy whose short factors are its long ones
    (files linked, OUT_DIR/model_longrope), so that vLLM and the trainer rotate alike (verl_bot/launch/families.py);
    `keep` leaves the model as it is. Any other model is left alone."""
    if run.dry_run != "0" or run.longrope != "long":
        return run
    dst = f"{run.out_dir}/model_longrope"
    try:
        if longrope_switch(read_hf_config(run.model_path) or {}) is None:
            return run
        return replace(run, model_path=str(longrope_copy(run.model_path, dst)))
    except Exception as err:  # noqa: BLE001 - any failure is the same refusal
        raise Refusal(f"could not make the LongRoPE copy of {run.model_path} at {dst}") from err


def link_ckpt(run: Run) -> None:
    """OUT_DIR/ckpt links to CKPT_DIR (where the smoke's verdict and a resumed run's metrics look); a folder of
    checkpoints already there (written before CKPT_DIR) is not moved."""
    link = Path(run.out_dir, "ckpt")
    if run.ckpt_dir == str(link):
        return
    Path(run.ckpt_dir).mkdir(parents=True, exist_ok=True)
    Path(run.out_dir).mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        try:
            link.rmdir()
        except OSError:
            raise Refusal(f"{link} holds the checkpoints of an earlier launch, and checkpoints now go to "
                          f"CKPT_DIR={run.ckpt_dir}: move them there, or set CKPT_DIR={link}") from None
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(run.ckpt_dir)


def fresh_metrics(ckpt: str | Path, metrics: str | Path) -> None:
    """A fresh run starts a fresh metrics file; a run that resumes from `ckpt` (verl's resume_mode=auto) keeps the
    metrics of the steps before it (verl_bot/hooks/resume.py)."""
    if not Path(ckpt, "latest_checkpointed_iteration.txt").is_file():
        Path(metrics).unlink(missing_ok=True)
