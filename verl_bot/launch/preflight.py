"""Start-up checks of a run that uses verl-bot: what cannot work is refused before any model loads.

`check_config(config)` runs on verl's fully composed config in the driver (`verl_bot.hooks.validate_config` calls it
from verl's own `validate_config`, before Ray starts) and raises `VerlBotConfigError` with one line naming the
problem and the fix. It asks the trainer paths' and modes' checks (`verl_bot.launch.trainer_modes`), the `bot`
manager's and its PRM's knobs, the reward-model path (`verl_bot.rewards.reward_model_path`), the data sources of the
local parquet files, each verl-bot method in use through its row in `ESTIMATORS` / `LOSSES` (its knobs, then its
own `check`), the panels' and token records' knobs, LongRoPE (`verl_bot.launch.families`) and the tokenizer's chat
template. What is refused and why: docs/run_safety.md; every message with its cause and fix: docs/troubleshooting.md.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl_bot.advantage import EstimatorSpec, estimator_spec
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch.entry_points import trainer_path
from verl_bot.launch.families import longrope_problem, read_hf_config
from verl_bot.launch.trainer_modes import trainer_mode_problem
from verl_bot.launch.verl_surface import surface_problem
from verl_bot.losses import LOSSES, LossSpec, loss_name
from verl_bot.observe import panels, token_records
from verl_bot.rewards.prm import prm_problem
from verl_bot.rewards.reward_model_path import reward_model_problem
from verl_bot.rewards.scorers import DEFAULT_SCORERS, HttpScorer, build_scorers
from verl_bot.rewards.settings import ManagerSettings, bot_manager_in_use, manager_settings, reads_dense_rewards
from verl_bot.rewards.verl_functions import default_knows, function_config


def _files(spec: Any) -> list[str]:
    if spec is None:
        return []
    if isinstance(spec, str):
        return [spec]
    return [str(f) for f in spec]


def local_parquet_files(config: Any, keys: tuple[str, ...] = ("train_files", "val_files")) -> list[str]:
    """The train/val files of the run that are local parquet files (others cannot be read here)."""
    data = config.get("data") or {}
    custom = data.get("custom_cls") or {}
    if custom.get("path"):
        return []
    files = [f for key in keys for f in _files(data.get(key))]
    paths = [os.path.expanduser(f) for f in files]
    return [p for p in paths if p.endswith(".parquet") and os.path.isfile(p)]


def data_sources(paths: Iterable[str]) -> dict[str, str]:
    """data_source -> the first file it appears in, over the `data_source` columns of parquet files."""
    import pyarrow.parquet as pq

    found: dict[str, str] = {}
    for path in paths:
        schema = pq.read_schema(path)
        if "data_source" not in schema.names:
            continue
        for source in pq.read_table(path, columns=["data_source"]).column("data_source").unique().to_pylist():
            found.setdefault(str(source), path)
    return found


def unscorable_sources(sources: Iterable[str], config: Any, settings: ManagerSettings) -> list[str]:
    """The data sources among `sources` the `bot` manager could not score: no configured or built-in scorer,
    no `reward.custom_reward_function` (which is asked about any data source), and unknown to verl's
    `default_compute_score`."""
    if "custom_reward_function" in function_config(config):
        return []
    known = {**DEFAULT_SCORERS, **settings.scorers}
    return [source for source in sources if source not in known and not default_knows(source)]


def _token_level_problem(
    config: Any, estimator: str, spec: EstimatorSpec, settings: ManagerSettings | None
) -> str | None:
    """A token-level estimator without a reward on every token: another reward manager (one scalar on the last
    token) or the `bot` manager with `token_level` false or `returns`, unless the estimator's row names a
    `scalar_knob` that is set (`bot`'s `+algorithm.bot_broadcast_scalar=true`: each response's scalar spread over its
    tokens, Eq. 4 with S = 0); or `algorithm.use_kl_in_reward=true`, whose per-token KL would be standardized like a
    reward (divided by a tied group's tiny std)."""
    algorithm = config.get("algorithm") or {}
    dense = settings is not None and settings.layout == "dense"
    scalar_key = f"{spec.settings.prefix}{spec.scalar_knob}" if spec.settings and spec.scalar_knob else None
    if algorithm.get("use_kl_in_reward", False):
        return (
            f"algorithm.use_kl_in_reward=true with adv_estimator={estimator}: verl-bot would standardize the "
            "per-token KL like a reward; set algorithm.use_kl_in_reward=false and use the actor's KL loss "
            "(actor_rollout_ref.actor.use_kl_loss=true, actor_rollout_ref.actor.kl_loss_coef=...)"
        )
    if dense or (scalar_key and getattr(spec.settings.from_config(algorithm), spec.scalar_knob)):
        return None
    manager = ((config.get("reward") or {}).get("reward_manager") or {}).get("name")
    layout = settings.layout if settings is not None else "scalar"
    where = (f"reward.reward_manager.name={manager} gives one scalar per response (on its last token)"
             if settings is None else
             f"token_level={'returns' if layout == 'returns' else 'false'} gives G on the last token only")
    return (
        f"adv_estimator={estimator} needs a reward on every token, but {where}; set "
        "reward.reward_manager.name=bot with +reward.reward_kwargs.bot.token_level=true"
        + (f", or +algorithm.{scalar_key}=true to spread each scalar over its tokens" if scalar_key else "")
    )


def methods_in_use(config: Any) -> list[tuple[str, EstimatorSpec | LossSpec]]:
    """(the key that selects it, its spec) of each verl-bot method the run uses: its estimator
    (`algorithm.adv_estimator`, `verl_bot.advantage.ESTIMATORS`) and its policy loss
    (`actor_rollout_ref.actor.policy_loss.loss_mode`, `verl_bot.losses.LOSSES`)."""
    estimator = str(getattr(config.algorithm.adv_estimator, "value", config.algorithm.adv_estimator))
    loss = loss_name(config)
    specs: list[tuple[str, EstimatorSpec | LossSpec | None]] = [
        (f"adv_estimator={estimator}", estimator_spec(estimator)),
        (f"policy_loss.loss_mode={loss}", LOSSES.get(loss) if loss is not None else None),
    ]
    return [(key, spec) for key, spec in specs if spec is not None]


def method_problem(config: Any, specs: list[tuple[str, EstimatorSpec | LossSpec]]) -> str | None:
    """The first thing the methods in use refuse: their knobs (each spec's `settings`, read from the `algorithm`
    config: VerlBotConfigError for a bad one), then their own start-up checks (each spec's `check`, given the
    run's local parquet train files), or None."""
    for _, spec in specs:
        if spec.settings is not None:
            spec.settings.from_config(config.algorithm)
    checks = [spec.check for _, spec in specs if spec.check is not None]
    train_files = local_parquet_files(config, ("train_files",)) if checks else []
    for check in checks:
        problem = check(config, train_files)
        if problem:
            return problem
    return None


def chat_template_problem(model: Any) -> str | None:
    """Why the local tokenizer of `model` (verl's `actor_rollout_ref.model`) cannot format prompts, or None.

    A tokenizer folder has a chat template when its tokenizer_config.json carries one or a chat_template.jinja
    / chat_template.json file sits beside it (transformers writes one of the three). A path that is not a local
    folder (a hub id, an hdfs:// path) is left to verl, which fails when it loads the tokenizer."""
    if model.get("custom_chat_template", None):
        return None
    path = str(model.get("tokenizer_path", None) or model.get("path", "") or "")
    config_file = os.path.join(path, "tokenizer_config.json")
    if not os.path.isfile(config_file):
        return None
    if any(os.path.isfile(os.path.join(path, name)) for name in ("chat_template.jinja", "chat_template.json")):
        return None
    try:
        with open(config_file, encoding="utf-8") as f:
            if json.load(f).get("chat_template"):
                return None
    except (OSError, ValueError):
        return None  # unreadable: verl's own tokenizer load reports it
    return chat_template_message(path)


def rope_problem(config: Any) -> str | None:
    """Why the rollout and the trainer would rotate the model's sequences differently (a LongRoPE model with
    distinct factors: `verl_bot.launch.families.longrope_problem`), or None; a model whose config cannot be read here is
    left to verl."""
    path = str((config.actor_rollout_ref.get("model") or {}).get("path", "") or "")
    hf_config = read_hf_config(path) if path else None
    if hf_config is None:
        return None
    rollout = config.actor_rollout_ref.rollout
    data = config.data
    return longrope_problem(
        hf_config, model=path, rollout=str(rollout.get("name", "")), max_model_len=rollout.get("max_model_len"),
        max_sequence=int(data.get("max_prompt_length", 0)) + int(data.get("max_response_length", 0)),
    )


def chat_template_message(path: str) -> str:
    """What is wrong and the fix, for a tokenizer without a chat template (this check's and the `hf` rollout's,
    which asks the loaded tokenizer where no local folder can be read)."""
    return (
        f"the tokenizer at {path!r} has no chat template, and verl's dataset and agent loop format every prompt "
        "with tokenizer.apply_chat_template: save one with the tokenizer (chat_template.jinja) or pass "
        "actor_rollout_ref.model.custom_chat_template=..."
    )


async def _check_credentials(servers: list[HttpScorer]) -> None:
    for server in servers:
        await server.check_credentials()


def check_config(config: Any, path: str | None = None) -> None:
    """Raise `VerlBotConfigError` (one line) for the first thing in `config` that cannot work with verl-bot on
    trainer path `path` ("v1", "legacy"; None: the one `trainer.use_v1` selects)."""
    estimator = str(getattr(config.algorithm.adv_estimator, "value", config.algorithm.adv_estimator))
    spec = estimator_spec(estimator)
    methods = methods_in_use(config)
    bot_manager = bot_manager_in_use(config)
    problem = token_records.config_problem(config.algorithm, config.trainer.get("total_training_steps"))
    if problem:
        raise VerlBotConfigError(problem)
    if not methods and not bot_manager:
        return
    panels.PanelSettings.from_config(config.algorithm)  # the trackers' token panels (verl_bot.hooks.v1.tracker_panel)
    problem = chat_template_problem(config.actor_rollout_ref.get("model") or {}) or rope_problem(config)
    if problem:
        raise VerlBotConfigError(problem)
    problem = trainer_mode_problem(config, path or trainer_path(config)) or surface_problem(config)
    if problem:
        raise VerlBotConfigError(problem)
    settings = manager_settings(config) if bot_manager else None
    if settings is not None and not reads_dense_rewards(estimator) and settings.token_level is True:
        raise VerlBotConfigError(
            f"reward.reward_kwargs.bot.token_level=true with adv_estimator={estimator}: the bot manager puts G on "
            f"every token, which {estimator} adds up over the response (L * w_g * G + w_s * sum S, a reward that "
            f"grows with the length); leave token_level unset ({estimator} then gets one reward per response, "
            "w_g * G) or set +reward.reward_kwargs.bot.token_level=false"
        )
    problem = method_problem(config, methods)
    if problem is None and spec is not None and spec.token_level:
        problem = _token_level_problem(config, estimator, spec, settings)
    if problem:
        raise VerlBotConfigError(problem)
    if not bot_manager:
        return
    problem = prm_problem(config, settings.per_token)  # the prm knobs (verl_bot.rewards.prm)
    if problem:
        raise VerlBotConfigError(problem)
    problem = reward_model_problem(config)  # verl's reward-model path (verl_bot.rewards.reward_model_path)
    if problem:
        raise VerlBotConfigError(problem)
    try:
        scorers = build_scorers(settings.scorers, timeout_s=settings.timeout_s, retries=settings.retries)
    except (ValueError, ImportError, AttributeError) as exc:
        raise VerlBotConfigError(f"reward.reward_kwargs.bot.scorers: {type(exc).__name__}: {exc}") from exc
    servers = [s for s in scorers.values() if isinstance(s, HttpScorer)]
    if servers:  # a server that is up and refuses our token: now, not after the models load and a rollout
        with ThreadPoolExecutor(1) as pool:  # its own event loop, also where the caller runs one
            pool.submit(asyncio.run, _check_credentials(servers)).result()
    sources = data_sources(local_parquet_files(config))
    missing = unscorable_sources(sorted(sources), config, settings)
    if missing:
        first = missing[0]
        raise VerlBotConfigError(
            f"bot reward manager: no scorer for data_source={first!r} (in {sources[first]})"
            + (f" nor {missing[1:]}" if len(missing) > 1 else "")
            + "; no reward.custom_reward_function is set and verl's default_compute_score does not know it; add "
            + f"+reward.reward_kwargs.bot.scorers.{first}=<builtin:NAME|python:MOD:FN|http://URL>"
        )
