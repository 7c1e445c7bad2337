"""What a recipe trains with that evaluation must repeat: its chat-template options and its response length.

`recipe_settings("aime_smollm")` runs the recipe's own dry run (`DRY_RUN=args bash recipes/aime_smollm.sh`: no
data, server or GPU needed) and reads its command line, so the recipe stays the one source:
`data.apply_chat_template_kwargs.*` (verl renders every prompt with them: SmolLM3's `enable_thinking=False`) and
`data.max_response_length` (the tokens a response may take).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from verl_bot.eval.records import EvalError

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_KEY = "data.apply_chat_template_kwargs."
LENGTH_KEY = "data.max_response_length"


def recipe_path(recipe: str) -> Path:
    """recipes/<name>.sh for a name (`aime_smollm`) or the script's path itself."""
    path = Path(recipe)
    if path.suffix != ".sh":
        path = ROOT / "recipes" / f"{recipe}.sh"
    if not path.is_file():
        raise EvalError(f"no recipe {recipe!r} (no {path})")
    return path


def parse_value(text: str):
    """A Hydra override's value as YAML reads it (True/False, numbers, strings)."""
    import yaml

    return yaml.safe_load(text)


def settings_of(args: list[str]) -> dict:
    """{"template_kwargs": {...}, "max_new_tokens": N} from a verl command line's overrides (the last one wins)."""
    out: dict = {"template_kwargs": {}}
    for arg in args:
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep:
            continue
        if key.startswith(TEMPLATE_KEY):
            out["template_kwargs"][key[len(TEMPLATE_KEY):]] = parse_value(value)
        elif key == LENGTH_KEY:
            out["max_new_tokens"] = int(value)
    return out


def recipe_args(recipe: str) -> list[str]:
    """The verl command line of `recipe` (its `DRY_RUN=args` output: `-m`, `verl.trainer.main_ppo`, overrides)."""
    path = recipe_path(recipe)
    env = {**os.environ, "DRY_RUN": "args"}
    out = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise EvalError(f"{path}: its dry run failed: {(out.stderr.strip().splitlines() or [''])[-1]}")
    return out.stdout.splitlines()


def recipe_settings(recipe: str) -> dict:
    """The template options and response length of `recipe` (`settings_of` its command line)."""
    return settings_of(recipe_args(recipe))
