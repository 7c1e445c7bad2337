"""verl's reward functions as a scorer: what a verl setup already scores with, for the `bot` manager.

For a `data_source` that no `reward.reward_kwargs.bot.scorers` entry names: `reward.custom_reward_function` when
set (verl's keys and signature), else verl's `default_compute_score` for the data sources it knows
(`verl_bot.rewards.verl_functions`); what the function returns becomes a REWARD_API verdict (`verdict_from_result`).
Sync functions run in `fn_workers` worker processes (`reward_servers.math.pool.WorkerPool`), each call in its
worker's main thread (so `signal.alarm` works) under a hard limit of `timeout_s`; async ones are awaited in the
reward loop. GenRM-style functions get `reward_router_address` and `reward_model_tokenizer` as verl's `naive`
manager passes them. Explained in docs/verl_setup.md (Where G and S come from) and docs/prm.md (Through verl's
reward-model path); the `turns` a multi-turn rollout adds to `extra_info`: docs/REWARD_API.md.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from verl_bot.credit.verdict import InvalidVerdict
from verl_bot.rewards.scorers import ScorerNotConfigured
from verl_bot.rewards.verl_functions import default_knows, function_config, load_reward_fn

WORKER_TARGET = "verl_bot.rewards.verl_scorer:call_in_worker"
ROUTER_PARAMS = ("reward_router_address", "reward_model_tokenizer")


def verdict_from_result(result: Any) -> dict:
    """A REWARD_API verdict from what a verl reward function returned (number, or dict with `score`)."""
    if isinstance(result, dict):
        if "score" not in result:
            raise InvalidVerdict(f"a dict from a verl reward function needs a 'score', got keys {sorted(result)}")
        parts = {
            str(key): float(value)
            for key, value in result.items()
            if key not in ("score", "local") and isinstance(value, bool | int | float | np.number | np.bool_)
        }
        turns = {"turns": result["turns"]} if "turns" in result else {}
        return {"global": {"score": result["score"], "parts": parts}, "local": result.get("local") or [], **turns}
    if isinstance(result, bool | int | float | np.number | np.bool_):
        # `acc` as verl's naive manager reports a number: verl's validation reads it (val-core/<source>/acc)
        return {"global": {"score": float(result), "parts": {"acc": float(result)}}, "local": []}
    raise InvalidVerdict(f"a verl reward function returned {type(result).__name__}, not a number or a dict")


def _call(fn: Callable[..., Any], kwargs: dict) -> dict:
    """`{"result": fn(**kwargs)}`, or `{"not_implemented": message}` when fn raises NotImplementedError."""
    try:
        return {"result": fn(**kwargs)}
    except NotImplementedError as exc:
        return {"not_implemented": str(exc)}


async def _call_async(fn: Callable[..., Any], kwargs: dict) -> dict:
    try:
        return {"result": await fn(**kwargs)}
    except NotImplementedError as exc:
        return {"not_implemented": str(exc)}


def accepts_router(fn: Callable[..., Any]) -> bool:
    """True when the user's function `fn` (as verl's `get_custom_reward_fn` wraps it) takes `ROUTER_PARAMS`:
    it names both, or it takes `**kwargs`."""
    from verl.trainer.ppo import reward as verl_reward

    wrappers = (verl_reward._call_with_kwargs, verl_reward._call_with_kwargs_async)
    while isinstance(fn, functools.partial):  # verl's wrapper: partial(_call_with_kwargs, raw_fn, reward_kwargs)
        fn = fn.args[0] if fn.func in wrappers else fn.func
    params = inspect.signature(fn).parameters.values()
    return set(ROUTER_PARAMS) <= {p.name for p in params} or any(p.kind is p.VAR_KEYWORD for p in params)


def _load_with_router(fn_config: dict) -> Callable[..., Any]:
    """`load_reward_fn(fn_config)`, with `ROUTER_PARAMS` bound when `fn_config` has a `reward_router` entry
    (`{"address", "tokenizer_path"}`: the tokenizer is loaded here, as verl's reward loop loads it)."""
    fn = load_reward_fn(fn_config)
    router = fn_config.get("reward_router")
    if router is None:
        return fn
    from verl.utils import hf_tokenizer
    from verl.utils.fs import copy_to_local

    tokenizer = hf_tokenizer(copy_to_local(router["tokenizer_path"]), trust_remote_code=True)
    return functools.partial(fn, reward_router_address=router["address"], reward_model_tokenizer=tokenizer)


_WORKER_FNS: dict[str, Callable[..., Any]] = {}


def call_in_worker(payload: dict) -> dict:
    """Worker-process side (`WORKER_TARGET`): build the function of `payload["fn"]` once, call it on
    `payload["kwargs"]` in this process's main thread. A payload without kwargs only builds it (warm-up)."""
    key = json.dumps(payload["fn"], sort_keys=True)
    if key not in _WORKER_FNS:
        _WORKER_FNS[key] = _load_with_router(payload["fn"])
    if "kwargs" not in payload:
        return {}
    return _call(_WORKER_FNS[key], payload["kwargs"])


class VerlFunctionScorer:
    """The reward function of the user's verl setup, for the data sources no configured scorer covers.

    Args:
        config: the trainer config (reads `reward.custom_reward_function`, `reward.sandbox_fusion`).
        compute_score: the function verl's `load_reward_manager` handed the manager (custom or default);
            None: built here from the config.
        workers: worker processes for sync functions; 0 = the reward loop's thread pool.
        timeout_s: hard limit per call in a worker process.
        reward_router_address, reward_model_tokenizer: what verl's reward loop hands the manager when it serves
            a reward model (else None); passed on to a custom function that takes them (`accepts_router`).
    """

    def __init__(self, config: Any, compute_score: Callable[..., Any] | None, workers: int, timeout_s: float,
                 reward_router_address: str | None = None, reward_model_tokenizer: Any = None):
        self.fn_config = function_config(config)
        self.custom = "custom_reward_function" in self.fn_config
        self.compute_score = compute_score or load_reward_fn(self.fn_config)
        self.router_kwargs = {}
        if reward_router_address is not None and self.custom and accepts_router(self.compute_score):
            self.router_kwargs = dict(zip(ROUTER_PARAMS, (reward_router_address, reward_model_tokenizer), strict=True))
            tokenizer_path = str(config.reward.reward_model.model_path)
            self.fn_config["reward_router"] = {"address": reward_router_address, "tokenizer_path": tokenizer_path}
        self.is_async = inspect.iscoroutinefunction(self.compute_score)
        self.workers = int(workers)
        self.timeout_s = float(timeout_s)
        self._pool = None
        self._pool_lock = threading.Lock()

    def describe(self) -> str:
        if self.custom:
            custom = self.fn_config["custom_reward_function"]
            return f"reward.custom_reward_function ({custom['path']}:{custom['name']})"
        return "verl's default_compute_score"

    def knows(self, data_source: str) -> bool:
        """A custom function takes every data source (as in verl); verl's default only those it knows."""
        return self.custom or default_knows(data_source)

    def for_source(self, data_source: str) -> _ForSource:
        """A scorer (`async score(item)`) for one data source."""
        return _ForSource(self, data_source)

    def _worker_pool(self):
        """The worker processes, started by the first caller (blocking; other callers wait for it)."""
        with self._pool_lock:
            if self._pool is None:
                from reward_servers.math.pool import WorkerPool

                pool = WorkerPool(
                    WORKER_TARGET,
                    n_workers=self.workers,
                    item_timeout_s=self.timeout_s,
                    chunk=1,  # one call at a time per worker: a slow call never holds others back
                    memory_mb=0,  # a user's function, not a parser bomb: no address-space limit
                    startup_timeout_s=max(60.0, self.timeout_s),
                    warmup={"fn": self.fn_config},
                )
                pool.start()
                atexit.register(pool.close)
                self._pool = pool
            return self._pool

    async def score(self, data_source: str, item: dict) -> dict:
        """The verdict of verl's function for one REWARD_API request item of `data_source`."""
        kwargs = {
            "data_source": data_source,
            "solution_str": item["response"],
            "ground_truth": item.get("ground_truth"),
            "extra_info": {**(item.get("extra_info") or {}), "turns": item["turns"]} if "turns" in item
            else item.get("extra_info"),
        }
        if self.is_async:
            out = await _call_async(self.compute_score, {**kwargs, **self.router_kwargs})
        elif self.workers == 0:
            call = functools.partial(_call, self.compute_score, {**kwargs, **self.router_kwargs})
            out = await asyncio.get_running_loop().run_in_executor(None, call)
        else:
            pool = self._pool or await asyncio.get_running_loop().run_in_executor(None, self._worker_pool)
            out = await pool.submit({"fn": self.fn_config, "kwargs": kwargs})
        if "not_implemented" in out:
            raise ScorerNotConfigured(
                f"bot reward manager: no scorer for data_source={data_source!r}: {self.describe()} raised "
                f"NotImplementedError ({out['not_implemented']}). Add "
                f"+reward.reward_kwargs.bot.scorers.{data_source}=<builtin:NAME|python:MOD:FN|http://URL>"
            )
        return verdict_from_result(out["result"])

    def close(self) -> None:
        """Stop the worker processes (they also exit on their own when this process ends)."""
        if self._pool is not None:
            self._pool.close()
            atexit.unregister(self._pool.close)
            self._pool = None


class _ForSource:
    """`VerlFunctionScorer` bound to one data source: the scorer interface `async score(item) -> verdict`."""

    def __init__(self, scorer: VerlFunctionScorer, data_source: str):
        self.scorer, self.data_source = scorer, data_source

    @property
    def self_timed(self) -> bool:
        """True when calls run in the worker processes, which enforce `timeout_s` per call themselves."""
        return not self.scorer.is_async and self.scorer.workers > 0

    async def score(self, item: dict) -> dict:
        return await self.scorer.score(self.data_source, item)
