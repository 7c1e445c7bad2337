"""Start-up checks of a run that uses verl-bot: what cannot work is refused before any model loads.

`check_config(config)` runs on verl's fully composed config in the driver
(`verl_bot.hooks.validate_config` calls it from verl's own `validate_config`,
before Ray starts) and raises `VerlBotConfigError` with one line naming the
problem and the fix. For a run that uses neither verl-bot's reward manager nor
one of its estimators it checks only the token-report knobs.

Refused:
- what verl's legacy trainer (`trainer.use_v1=false`) cannot do (`verl_bot.launch.trainer_modes`);
- `trainer.v1.trainer_mode=separate_async` where verl's own assertions would stop
  it after Ray started, or on the CPU platform (no checkpoint engine), and LoRA
  unmerged on verl-bot's `hf` rollout (`verl_bot.launch.trainer_modes`);
- a token-level estimator of verl-bot (`bot`, `pure`, ...) without dense token
  rewards: another reward manager (one scalar on the last token) or the `bot`
  manager with `token_level=false` (unless `+algorithm.bot_broadcast_scalar=true`
  for `bot`: each response's scalar spread over its tokens, Eq. 4 with S = 0);
- the opposite, the `bot` manager with `token_level=true` set for an estimator
  that does not read dense rewards (verl's `grpo`, `gspo`, `rloo`, `gae`, ...;
  `reco`, `vps`, `grail`): it would sum G over the response's tokens, a reward
  that grows with the length. Left unset (`auto`), such an estimator gets one
  reward per response (`verl_bot.rewards.settings.manager_settings`);
- `algorithm.use_kl_in_reward=true` with such an estimator: the per-token KL
  would be standardized like a reward (divided by a tied group's tiny std);
  use the actor's KL loss (`actor_rollout_ref.actor.use_kl_loss=true`);
- `reward.reward_model.enable=true` with the `bot` manager where the manager cannot
  use the served model (`verl_bot.rewards.reward_model_path`): neither `prm.url=router`
  nor a custom function to call it, a colocated model (no data_source or ground truth),
  a PRM engine other than vLLM, or an engine asleep (`free_cache_engine=true`);
- a `data_source` of the local train/val parquet files that no scorer serves
  (files that are not local parquet, and `data.custom_cls` datasets, are checked
  when their rows are scored: `verl_bot.hooks.v1.replay_buffer`);
- an estimator knob of the wrong kind (e.g. `+algorithm.bot_std_floor=-1`);
- a `reward.reward_kwargs.bot.prm` knob that cannot work (`verl_bot.rewards.prm.prm_problem`: a bad
  value, `url=router` without verl's reward model, one reward per response, a step tag that is not one token);
- unknown `reward.reward_kwargs.bot` keys, and scorer specs that cannot be built
  (an unknown builtin, a `python:` function that does not import);
- a reward server (an `http://` scorer) that is up and refuses our credentials
  (HTTP 401/403 to an empty batch; `REWARD_SERVER_TOKEN`): a server that is not
  up yet passes, and a refusal during the run stops it before its next update
  (`verl_bot.hooks.v1.replay_buffer`);
- `adv_estimator=vps` without its agent loop (`default_agent_loop=vps_single_turn`,
  which writes the probe results it reads), on a rollout engine whose verl server
  returns no `prompt_logprobs` (trtllm), or on local train files without any
  ground-truth answer (`reward_model.ground_truth`) to probe for;
- the trackers' token-panel knobs (`+algorithm.token_panel_*`: `verl_bot.observe.panels`)
  of a kind or range that cannot work;
- for any run: token-report knobs that cannot work (`algorithm.token_report_steps`
  outside the run, `token_report_groups` < 0; `verl_bot.observe.token_records`).
- ReCo (`adv_estimator=reco` or `policy_loss.loss_mode=reco`): an unknown
  `+algorithm.reco_*` key or a bad value, and the `reco` loss with verl's
  distillation (whose loss does not receive the knobs). The `reco` loss with one
  mini-batch and one epoch per step is not refused but warned about: its token
  weight is 1 on the first mini-batch of every step, so it changes nothing.
- a LongRoPE model (Phi-3/Phi-4) with distinct short and long factors whose rollout
  and trainer would rotate with different ones (`verl_bot.launch.families`): the rollout
  would sample another policy than the one trained;
- a local model folder (`actor_rollout_ref.model.path`, or its `tokenizer_path`)
  whose tokenizer has no chat template while `custom_chat_template` is unset:
  verl's dataset and agent loop format every prompt with it (found from the
  tokenizer's files, without loading it; a hub id is checked when it loads).
- `adv_estimator=grail` (`grail_problem`) where its weights are not computed
  or not tested: an actor strategy other
  than `fsdp2` (FSDP1 needs an accelerator and is untested; Megatron, veomni,
  ... have no hook), Ulysses sequence parallelism, fused kernels (no logits),
  or distillation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl_bot.advantage import estimator_spec
from verl_bot.advantage import reco as reco_weights
from verl_bot.advantage.vps import AGENT_LOOP
from verl_bot.credit.turns import multi_turn_problem
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch.families import longrope_problem, read_hf_config
from verl_bot.launch.trainer_modes import trainer_mode_problem
from verl_bot.losses import loss_name
from verl_bot.losses import reco as reco_loss
from verl_bot.observe import panels, token_records
from verl_bot.rewards.prm import prm_problem
from verl_bot.rewards.reward_model_path import reward_model_problem
from verl_bot.rewards.scorers import DEFAULT_SCORERS, HttpScorer, build_scorers
from verl_bot.rewards.settings import bot_manager_in_use, manager_settings, reads_dense_rewards, user_settings
from verl_bot.rewards.verl_functions import default_knows, function_config
from verl_bot.vps.probing import answer_text, probe_params

BROADCAST_KEY = "bot_broadcast_scalar"
logger = logging.getLogger("verl_bot")


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


def unscorable_sources(sources: Iterable[str], config: Any, settings: dict) -> list[str]:
    """The data sources among `sources` the `bot` manager could not score: no configured or built-in scorer,
    no `reward.custom_reward_function` (which is asked about any data source), and unknown to verl's
    `default_compute_score`."""
    if "custom_reward_function" in function_config(config):
        return []
    known = {**DEFAULT_SCORERS, **dict(settings.get("scorers") or {})}
    return [source for source in sources if source not in known and not default_knows(source)]


def _token_level_problem(config: Any, estimator: str, settings: dict | None) -> str | None:
    algorithm = config.get("algorithm") or {}
    dense = settings is not None and bool(settings["token_level"])
    if algorithm.get("use_kl_in_reward", False):
        return (
            f"algorithm.use_kl_in_reward=true with adv_estimator={estimator}: verl-bot would standardize the "
            "per-token KL like a reward; set algorithm.use_kl_in_reward=false and use the actor's KL loss "
            "(actor_rollout_ref.actor.use_kl_loss=true, actor_rollout_ref.actor.kl_loss_coef=...)"
        )
    if dense or (estimator == "bot" and algorithm.get(BROADCAST_KEY, False)):
        return None
    manager = ((config.get("reward") or {}).get("reward_manager") or {}).get("name")
    where = "token_level=false" if settings is not None else f"reward.reward_manager.name={manager}"
    return (
        f"adv_estimator={estimator} needs a reward on every token, but {where} gives one scalar per response "
        "(on its last token); set reward.reward_manager.name=bot with +reward.reward_kwargs.bot.token_level=true"
        + (
            ", or +algorithm.bot_broadcast_scalar=true to spread each scalar over its tokens"
            if estimator == "bot"
            else ""
        )
    )


def files_without_answers(paths: Iterable[str]) -> list[str]:
    """The parquet files among `paths` in which no row has a ground truth GRPO-VPS can probe for
    (`reward_model.ground_truth`, a string or a number: `verl_bot.vps.probing.answer_text`)."""
    import pyarrow.parquet as pq

    bad = []
    for path in paths:
        rows = []
        if "reward_model" in pq.read_schema(path).names:
            rows = pq.read_table(path, columns=["reward_model"]).column("reward_model").to_pylist()
        if not any(isinstance(r, dict) and answer_text(r.get("ground_truth")) for r in rows):
            bad.append(path)
    return bad


def _vps_problem(config: Any) -> str | None:
    no_answers = files_without_answers(local_parquet_files(config, ("train_files",)))
    if no_answers:
        return (
            f"adv_estimator=vps probes the model's belief in each prompt's correct answer, but no row of "
            f"{no_answers[0]} has one (reward_model.ground_truth: a string or a number); use a task with one "
            "correct answer per prompt (e.g. toy_math, AIME, verl's math data)"
        )
    rollout = (config.get("actor_rollout_ref") or {}).get("rollout") or {}
    engine = rollout.get("name")
    try:
        if engine is not None:  # unset, verl itself refuses the run
            probe_params(str(engine))
    except VerlBotConfigError as exc:
        return str(exc)
    loop = (rollout.get("agent") or {}).get("default_agent_loop")
    if loop != AGENT_LOOP:
        return (
            f"adv_estimator=vps reads belief probes that the {AGENT_LOOP} agent loop writes, but "
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}; set it to {AGENT_LOOP}"
        )
    return None


def _reco_problem(config: Any, estimator: str) -> str | None:
    """What is wrong with a run's ReCo settings (None when fine or ReCo is off); warns when its loss is inert.

    The estimator's knobs are checked with the other estimators' (`EstimatorSpec.options`); here the names of
    both halves' knobs, and the loss's.
    """
    actor = (config.get("actor_rollout_ref") or {}).get("actor") or {}
    loss_on = loss_name(config) == "reco"
    if estimator != "reco" and not loss_on:
        return None
    algorithm = config.get("algorithm") or {}
    knobs = (*reco_weights.KNOBS, *reco_loss.KNOBS)
    unknown = sorted(str(k) for k in algorithm if str(k).startswith("reco_") and k not in knobs)
    if unknown:
        return f"unknown ReCo setting(s) algorithm.{', algorithm.'.join(unknown)}; known: {', '.join(sorted(knobs))}"
    if not loss_on:
        return None
    reco_loss.ratio_options(algorithm, float(actor.get("clip_ratio_c", 3.0)))
    if (config.get("distillation") or {}).get("enabled", False):
        return (
            "policy_loss.loss_mode=reco with distillation.enabled=true: verl's distillation loss does not pass "
            "verl-bot's loss settings on; use the reco estimator with the vanilla loss, or switch distillation off"
        )
    mini, batch = actor.get("ppo_mini_batch_size"), (config.get("data") or {}).get("train_batch_size")
    if int(actor.get("ppo_epochs", 1)) == 1 and mini is not None and batch is not None and int(mini) >= int(batch):
        logger.warning(
            "policy_loss.loss_mode=reco with one mini-batch (ppo_mini_batch_size=%s >= data.train_batch_size=%s) "
            "and ppo_epochs=1: the variance ratio is 1 on the first mini-batch of a step, so the reco loss is "
            "verl's vanilla loss here; lower ppo_mini_batch_size or raise ppo_epochs for it to act",
            mini,
            batch,
        )
    return None


def grail_problem(config: Any) -> str | None:
    """Why `adv_estimator=grail` cannot run with `config` (one line), or None.

    Its knobs are checked by the estimator's own parser (`GrailSettings.from_config`, the `options` of its row).
    """
    actor = config.actor_rollout_ref.actor
    strategy = str(actor.get("strategy", "fsdp"))
    if strategy == "fsdp":
        return (
            "adv_estimator=grail with actor_rollout_ref.actor.strategy=fsdp (FSDP1): GRAIL's extra backward is "
            "tested on FSDP2 only; set actor_rollout_ref.actor.strategy=fsdp2"
        )
    if strategy != "fsdp2":
        return (
            f"adv_estimator=grail with actor_rollout_ref.actor.strategy={strategy}: GRAIL's weights are computed in "
            "verl's FSDP engine only; set actor_rollout_ref.actor.strategy=fsdp2"
        )
    sp = max(int(actor.get("ulysses_sequence_parallel_size", 1) or 1),
             int((actor.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size", 1) or 1))
    if sp > 1:
        return (
            f"adv_estimator=grail with Ulysses sequence parallelism (ulysses_sequence_parallel_size={sp}): the "
            "saliency needs whole sequences on one rank; set actor_rollout_ref.actor.ulysses_sequence_parallel_size=1"
        )
    if (config.actor_rollout_ref.get("model") or {}).get("use_fused_kernels", False):
        return (
            "adv_estimator=grail with actor_rollout_ref.model.use_fused_kernels=true: the saliency needs the "
            "answer's logits, which fused kernels never build; set use_fused_kernels=false"
        )
    if (config.get("distillation") or {}).get("enabled", False):
        return "adv_estimator=grail with distillation.enabled=true is not supported; disable distillation"
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


def check_config(config: Any) -> None:
    """Raise `VerlBotConfigError` (one line) for the first thing in `config` that cannot work with verl-bot."""
    estimator = str(getattr(config.algorithm.adv_estimator, "value", config.algorithm.adv_estimator))
    spec = estimator_spec(estimator)
    bot_manager = bot_manager_in_use(config)
    problem = token_records.config_problem(config.algorithm, config.trainer.get("total_training_steps"))
    if problem:
        raise VerlBotConfigError(problem)
    if spec is None and not bot_manager and loss_name(config) is None:
        return
    try:
        panels.panel_settings(config.algorithm)  # the trackers' token panels (verl_bot.hooks.v1.tracker_panel)
    except ValueError as exc:
        raise VerlBotConfigError(str(exc)) from exc
    problem = chat_template_problem(config.actor_rollout_ref.get("model") or {}) or rope_problem(config)
    if problem:
        raise VerlBotConfigError(problem)
    problem = trainer_mode_problem(config) or _reco_problem(config, estimator) or multi_turn_problem(config, estimator)
    if problem:
        raise VerlBotConfigError(problem)
    settings = manager_settings(config) if bot_manager else None
    if spec is not None and spec.options is not None:
        spec.options(config.algorithm)
    if bot_manager and not reads_dense_rewards(estimator) and user_settings(config).get("token_level") is True:
        raise VerlBotConfigError(
            f"reward.reward_kwargs.bot.token_level=true with adv_estimator={estimator}: the bot manager puts G on "
            f"every token, which {estimator} adds up over the response (L * w_g * G + w_s * sum S, a reward that "
            f"grows with the length); leave token_level unset ({estimator} then gets one reward per response, "
            "w_g * G) or set +reward.reward_kwargs.bot.token_level=false"
        )
    if estimator == "grail":
        problem = grail_problem(config)
        if problem:
            raise VerlBotConfigError(problem)
    if spec is not None and spec.token_level:
        problem = _token_level_problem(config, estimator, settings)
        if problem:
            raise VerlBotConfigError(problem)
    if estimator == "vps":
        problem = _vps_problem(config)
        if problem:
            raise VerlBotConfigError(problem)
    if not bot_manager:
        return
    problem = prm_problem(config, bool(settings["token_level"]))  # the prm knobs (verl_bot.rewards.prm)
    if problem:
        raise VerlBotConfigError(problem)
    problem = reward_model_problem(config)  # verl's reward-model path (verl_bot.rewards.reward_model_path)
    if problem:
        raise VerlBotConfigError(problem)
    try:
        scorers = build_scorers(settings["scorers"], timeout_s=settings["timeout_s"], retries=settings["retries"])
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
