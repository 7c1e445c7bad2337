"""Reads verl 0.9.1's own reward functions: loaded the way verl loads them, and the data sources verl knows.

Nothing of verl is changed here (`verl_bot.hooks` holds the wrappers). For the `bot` manager
(`verl_bot.rewards.verl_scorer`) and the start-up checks (`verl_bot.launch.preflight`): which function the user's
verl setup scores with, as plain data a fresh worker process can rebuild it from (`function_config`), that function
built by verl's own loader (`load_reward_fn`), and whether verl's `default_compute_score` scores a data source
(`default_knows`, read from its source code: a verl upgrade must read it too). Explained in docs/verl_setup.md,
section Where G and S come from.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable
from typing import Any


def function_config(config: Any) -> dict:
    """Plain-data description of the reward function verl would hand a reward manager for `config`.

    Returns `{"custom_reward_function": {"path", "name", "reward_kwargs"}}` when
    `reward.custom_reward_function.path` is set; else `{"sandbox_fusion": {"url", "memory_limit_mb"}}` when
    `reward.sandbox_fusion.url` is set; else `{}` (plain `default_compute_score`).
    """
    reward = config.get("reward") or {}
    custom = reward.get("custom_reward_function") or {}
    if custom.get("path"):
        return {
            "custom_reward_function": {
                "path": str(custom["path"]),
                "name": str(custom.get("name") or "compute_score"),
                "reward_kwargs": _plain(custom.get("reward_kwargs") or {}),
            }
        }
    sandbox = reward.get("sandbox_fusion") or {}
    if sandbox.get("url"):
        return {"sandbox_fusion": {"url": str(sandbox["url"]), "memory_limit_mb": sandbox.get("memory_limit_mb", 1024)}}
    return {}


def _plain(value: Any) -> Any:
    """An OmegaConf node (or anything else) as plain Python containers."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    return dict(value) if isinstance(value, dict) else value


def load_reward_fn(fn_config: dict) -> Callable[..., Any]:
    """The function `compute_score(data_source, solution_str, ground_truth, extra_info, ...)` for `fn_config`.

    A custom function comes from verl's own loader, `reward_kwargs` merged in as verl does; the default is
    verl's `default_compute_score` (with the sandbox URL when configured; verl's cross-process semaphore is a
    `multiprocessing.Manager` object of the reward-loop process and is left out).
    """
    custom = fn_config.get("custom_reward_function")
    if custom:
        from omegaconf import OmegaConf
        from verl.trainer.ppo.reward import get_custom_reward_fn

        return get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": custom}}))
    from verl.utils.reward_score import default_compute_score

    sandbox = fn_config.get("sandbox_fusion")
    if sandbox:
        return functools.partial(
            default_compute_score, sandbox_fusion_url=sandbox["url"], memory_limit_mb=sandbox["memory_limit_mb"]
        )
    return default_compute_score


def _is_data_source(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "data_source"


def _strings(node: ast.AST) -> set[str]:
    value = ast.literal_eval(node)
    return {value} if isinstance(value, str) else {str(v) for v in value}


@functools.cache
def default_data_sources() -> tuple[frozenset[str], tuple[str, ...]]:
    """(names, prefixes): the data sources verl's `default_compute_score` scores, read from its source code.

    The names and prefixes its if-chain compares `data_source` with (`==`, `in [...]`, `.startswith(...)`), read
    once, without calling it: verl 0.9.1 raises `NotImplementedError` for any other data source, and calling it on a
    made-up response to find out would run a real scorer on garbage. A verl upgrade must read it too.
    """
    from verl.utils.reward_score import default_compute_score

    tree = ast.parse(textwrap.dedent(inspect.getsource(default_compute_score)))
    names: set[str] = set()
    prefixes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _is_data_source(node.left):
            for op, operand in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.Eq | ast.In):
                    names |= _strings(operand)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and _is_data_source(node.func.value)
        ):
            prefixes |= _strings(node.args[0])
    if "openai/gsm8k" not in names:
        import verl

        from verl_bot.errors import VerlApiMismatch

        raise VerlApiMismatch(
            f"verl-bot could not read the data sources of verl {verl.__version__}'s default_compute_score "
            "(written for verl 0.9.1): name a scorer per data_source with +reward.reward_kwargs.bot.scorers"
        )
    return frozenset(names), tuple(sorted(prefixes))


def default_knows(data_source: str) -> bool:
    """True when verl's `default_compute_score` scores `data_source` (it raises NotImplementedError otherwise)."""
    names, prefixes = default_data_sources()
    return data_source in names or data_source.startswith(prefixes)
