"""The `bot` reward manager: scorer verdicts -> dense per-token rewards for verl's reward loop.

Selected with `reward.reward_manager.name=bot`. For each response it calls the
scorer chosen by the row's `data_source`, then composes
`r_t = w_g * G + w_s * S_t` over the response tokens and returns the vector as
`reward_score` (`verl_bot.credit.dense` carries it into `token_level_rewards`).

Scorer of a data_source, first match wins:
1. `reward.reward_kwargs.bot.scorers.<data_source>` (built in: toy_lint);
2. `reward.custom_reward_function` (verl's keys and signature) when set;
3. verl's `default_compute_score`, for the data sources it knows (openai/gsm8k, lighteval/MATH, aime*, ...).
Steps 2-3: `verl_bot.rewards.verl_scorer`. A data_source none of them knows is a configuration error.

Knobs, under `reward.reward_kwargs.bot` (add them with `+reward.reward_kwargs.bot.KEY=VALUE`;
defaults in `verl_bot.rewards.settings`):

    w_global          1.0   w_g, weight of the global score G on every token
    w_local           1.0   w_s, weight of the local signal S_t
    local_clip        1.0   |S_t| is clipped to this bound per token (the paper's "bounded S"); 0 = no clip
    scorers           {}    data_source -> scorer spec (see verl_bot.rewards.scorers);
                            built in: toy_lint -> builtin:toy_lint
    fn_workers        2     worker processes for verl's sync reward functions (steps 2-3 above);
                            0: verl's way, threads of the reward loop (no signal.alarm, no hard timeout)
    timeout_s         120   per scorer call (HTTP total timeout / in-process wait)
    retries           2     extra HTTP attempts (round-robin over the URLs, backoff)
    failure_score     0.0   G reported for a rollout whose scorer failed (raised, timed out,
                            answered garbage); S = 0, `scorer_failed` = 1, and the rollout takes
                            no part in training (advantage 0: verl_bot.hooks.v1.multi_trajectory)
    max_failure_rate  0.5   the run stops when more than this share of a step's rollouts
    failure_patience  3     ... failed, this many steps in a row (verl_bot.hooks.v1.compute_advantage)
    token_level       auto  false: return only w_g * G as one scalar, which verl puts on
                            the last token (its stock layout): the global-reward-only
                            input of the GRPO/GSPO/DAPO baselines, same scorers; auto:
                            true for the estimators that read dense rewards (bot, pure,
                            pass), false for every other (verl's grpo, rloo, gae, ...,
                            reco, vps, grail), which would add G up over the tokens;
                            true with such an estimator is refused at start-up

DAPO's overlong shaping reads verl's own keys, as verl's `dapo` manager does:
`+reward.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor}` and
`+reward.reward_kwargs.max_resp_len`; the penalty is added to G (`overlong_penalty`).

`reward_extra_info` of every response: `score` (G, shaping included), every part
of G by name, `scorer_failed` and `scorer_error` (0/1), `scorer_error_msg` (the
failure's message, "" if none), `flags` (the verdict's flags, comma-joined), and
`solved` and `acc` (1/0: the verdict's `info.solved`, `info.correct` for math,
`info.compiled` for React; absent when the scorer reports none of them; 0 for a
failed scorer) and `overlong` when the shaping is on -> verl metrics
`reward/<key>/mean` and `reward/flag/<name>/mean` (`verl_bot.rewards.metrics`);
`acc` makes verl's `val-core/<data_source>/acc/mean@N` the accuracy / compile rate.
With dense rewards (`token_level`) also `local_signal`: 1 when at least one token of
the response gets a non-zero local signal S_t, else 0 (a failed scorer: 0) ->
`reward/local_signal/mean`, the share of rollouts that carry any local signal: 0
means `bot` trains on G alone there, as GRPO would (e.g. a reasoning model's answer
the math server found no steps in).

A configuration error (no scorer for the row's `data_source`, a reward server
refusing the credentials) is not raised here (verl would tag the group failed
and train on): the response gets a zero reward carrying the
`verl_bot.errors.FATAL_KEY` marker, which stops the run (`verl_bot.errors`).

When `algorithm.adv_estimator` reads named reward streams (`pure`, `pass`), `reward_score`
also carries them: `verl_bot.credit.streams`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from verl_bot.credit.sessions import (
    response_length,
    session_reward_score,
    session_trajectories,
    trajectories_request,
    trajectory_local,
)
from verl_bot.credit.spans import token_char_spans
from verl_bot.credit.streams import streams_for, token_streams, verdict_format, verdict_outcome
from verl_bot.credit.turns import (
    multi_turn_info,
    request_turn_count,
    rollout_mask,
    turn_request,
    unused_turns,
    with_turn_values,
)
from verl_bot.credit.verdict import compose_token_rewards, local_token_values, validate_verdict
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.rewards.metrics import FLAGS_KEY, LOCAL_SIGNAL_KEY
from verl_bot.rewards.prm import PrmClient, PrmResult, prm_metrics, prm_settings
from verl_bot.rewards.scorers import ScorerNotConfigured, build_scorers
from verl_bot.rewards.settings import manager_settings
from verl_bot.rewards.verl_scorer import VerlFunctionScorer

logger = logging.getLogger("verl_bot")


def overlong_penalty(length: int, max_resp_len: int, buffer_len: int, penalty_factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment (arXiv 2503.14476): 0 up to `max_resp_len - buffer_len` tokens, then
    linear down to `-penalty_factor` at `max_resp_len` (verl's `dapo` reward manager computes the same)."""
    exceed = length - (max_resp_len - buffer_len)
    return min(-exceed / buffer_len * penalty_factor, 0.0)


def overlong_settings(config: Any) -> tuple[int, int, float] | None:
    """(max_resp_len, buffer_len, penalty_factor) from verl's DAPO keys, or None when the shaping is off."""
    reward_kwargs = (config.get("reward") or {}).get("reward_kwargs") or {}
    buffer_cfg = reward_kwargs.get("overlong_buffer_cfg") or {}
    if not buffer_cfg.get("enable", False):
        return None
    max_resp_len, buffer_len = reward_kwargs.get("max_resp_len"), int(buffer_cfg.get("len", 0))
    if max_resp_len is None or not 0 < buffer_len <= int(max_resp_len):
        raise ValueError(
            f"overlong shaping needs reward.reward_kwargs.max_resp_len >= overlong_buffer_cfg.len > 0, "
            f"got max_resp_len={max_resp_len}, len={buffer_len}"
        )
    return int(max_resp_len), buffer_len, float(buffer_cfg.get("penalty_factor", 1.0))


def clip_local(local: np.ndarray, bound: float) -> np.ndarray:
    """S_t clipped to [-bound, bound] per token ((n,) -> (n,)); bound 0 leaves S as it is."""
    return np.clip(local, -bound, bound) if bound > 0 else local


def _prompt_text(item: Any, tokenizer: Any) -> str:
    """The task text the policy saw: the last user message of `raw_prompt`, else the decoded prompt ids."""
    raw_prompt = item.non_tensor_batch.get("raw_prompt")
    if raw_prompt is not None:
        for message in reversed(list(raw_prompt)):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content", ""))
    prompt_ids = item.batch["prompts"]
    return tokenizer.decode(prompt_ids[prompt_ids != tokenizer.pad_token_id].tolist(), skip_special_tokens=True)


class BoTRewardManager(RewardManagerBase):
    """Token-level reward manager: one scorer call per response, dense rewards out."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        self.settings = manager_settings(config)
        self.overlong = overlong_settings(config)
        self.streams = (
            streams_for((config.get("algorithm") or {}).get("adv_estimator")) if self.settings["token_level"] else ()
        )
        self.scorers = build_scorers(
            self.settings["scorers"], timeout_s=self.settings["timeout_s"], retries=self.settings["retries"]
        )
        self.verl_scorer = VerlFunctionScorer(
            config, compute_score, workers=self.settings["fn_workers"], timeout_s=self.settings["timeout_s"],
            reward_router_address=reward_router_address, reward_model_tokenizer=reward_model_tokenizer,
        )
        prm = prm_settings(config) if self.settings["token_level"] else None  # S from a served PRM (docs/prm.md)
        rm_path = ((config.get("reward") or {}).get("reward_model") or {}).get("model_path")
        self.prm = None if prm is None else PrmClient.from_settings(
            prm, reward_router_address, reward_model_tokenizer, rm_path,
            timeout_s=self.settings["timeout_s"], retries=self.settings["retries"],
        )

    def _scorer_for(self, data_source: str):
        """The configured scorer of `data_source`, else verl's reward function when it knows the data source."""
        if data_source in self.scorers:
            return self.scorers[data_source]
        if not self.verl_scorer.knows(data_source):
            raise ScorerNotConfigured(
                f"bot reward manager: no scorer for data_source={data_source!r}: none in "
                f"reward.reward_kwargs.bot.scorers (configured: {sorted(self.scorers)}), no "
                "reward.custom_reward_function, and verl's default_compute_score does not know it. Add "
                f"+reward.reward_kwargs.bot.scorers.{data_source}=<builtin:NAME|python:MOD:FN|http://URL>"
            )
        return self.verl_scorer.for_source(data_source)

    async def _verdict(self, data_source: str, request: dict) -> tuple[dict, str | None]:
        """The scorer's validated verdict, or the failure sentinel; returns (verdict, failure message or None).

        A `VerlBotConfigError` (no scorer, credentials refused) is raised: no retry or sentinel can fix it.
        """
        scorer = self._scorer_for(data_source)
        try:
            if getattr(scorer, "self_timed", False):  # verl_scorer's worker processes kill a call past timeout_s
                raw = await scorer.score(request)  # (their start-up and the queue are not the call's time)
            else:
                raw = await asyncio.wait_for(scorer.score(request), timeout=self.settings["timeout_s"])
            outputs = max(1, len(request.get("trajectories", ())))  # a multi-output loop's session
            return validate_verdict(raw, request_turn_count(request), outputs), None
        except VerlBotConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - any other scorer failure becomes the documented sentinel
            message = f"{type(exc).__name__}: {exc}"
            logger.warning("scorer for %s failed (%s); sentinel reward", data_source, message)
            return self._sentinel(), message[:500]

    def _sentinel(self) -> dict:
        """The verdict of a rollout whose scorer failed: G = failure_score, no local signal."""
        return validate_verdict({"global": {"score": self.settings["failure_score"], "parts": {}}, "local": []})

    async def _verdict_and_prm(self, data_source: str, request: dict) -> tuple[dict, str | None, dict]:
        """`_verdict`, with the PRM's call alongside where it gives S (`verl_bot.rewards.prm`): the verdict's local
        spans replaced by (or added to) the PRM's, a PRM fault the failed-scorer sentinel; plus the PRM's metrics."""
        if self.prm is None or not self.prm.covers(data_source):
            return (*await self._verdict(data_source, request), {} if self.prm is None else prm_metrics(None, False))
        scored, prm = await asyncio.gather(
            self._verdict(data_source, request),
            asyncio.wait_for(self.prm.score(request["prompt"], request["response"]), self.settings["timeout_s"]),
            return_exceptions=True,
        )
        for outcome in (scored, prm):  # a cancellation or a configuration error (fatal marker) goes up
            if isinstance(outcome, VerlBotConfigError) or not isinstance(outcome, Exception | tuple | PrmResult):
                raise outcome
        if isinstance(prm, Exception):
            message = f"prm: {type(prm).__name__}: {prm}"
            logger.warning("the PRM failed for %s (%s); sentinel reward", data_source, message)
            return self._sentinel(), message[:500], prm_metrics(None, True)
        verdict, failure = scored
        verdict = prm.applied(verdict, self.prm.settings["combine"]) if failure is None else verdict
        return verdict, failure, prm_metrics(prm, False)

    def _fatal(self, message: str, length: int) -> dict:
        """A zero reward carrying the marker that stops the run (`verl_bot.errors`)."""
        logger.error("%s", message)
        zeros = [0.0] * length
        info = {FATAL_KEY: message, "scorer_failed": 1.0}
        if not self.settings["token_level"]:
            return {"reward_score": 0.0, "reward_extra_info": info}
        if not self.streams:
            return {"reward_score": zeros, "reward_extra_info": info}
        streams = dict.fromkeys(self.streams, zeros)
        return {"reward_score": {"token_rewards": zeros, "streams": streams}, "reward_extra_info": info}

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]  # a multi-output sample: the last output is `response` (verl_bot.credit.sessions)
        response_ids = item.batch["responses"]
        length = response_length(data, len(data) - 1)  # not the attention mask: rows are pad_sequence'd
        valid_ids = response_ids[:length].tolist()
        data_source = str(item.non_tensor_batch.get("data_source", ""))
        reward_model = item.non_tensor_batch.get("reward_model") or {}

        text, token_spans = await asyncio.get_running_loop().run_in_executor(
            None, token_char_spans, self.tokenizer, valid_ids
        )
        tool_fields, num_turns = (item.non_tensor_batch.get(k) for k in ("tool_extra_fields", "__num_turns__"))
        try:  # multi-turn (verl's ToolAgentLoop): the mask of generated tokens (verl_bot.credit.turns)
            mask = rollout_mask(tool_fields, num_turns, length)
        except VerlBotConfigError as exc:
            return self._fatal(str(exc), length)
        request = {
            "prompt": _prompt_text(item, self.tokenizer),
            "response": text,
            "ground_truth": reward_model.get("ground_truth") if isinstance(reward_model, dict) else None,
            "extra_info": {
                **(item.non_tensor_batch.get("extra_info") or {}), **multi_turn_info(tool_fields, num_turns)
            },
            **turn_request(mask, token_spans),
        }
        trajectories = await session_trajectories(data, self.tokenizer) if len(data) > 1 else []
        request.update(trajectories_request(trajectories))
        try:
            verdict, failure, prm_extra = await self._verdict_and_prm(data_source, request)
        except VerlBotConfigError as exc:
            return self._fatal(str(exc), length)
        score = verdict["global"]["score"]
        extra = {
            **verdict["global"]["parts"],
            "scorer_failed": float(failure is not None),
            "scorer_error": float(verdict["error"] is not None),
            "scorer_error_msg": failure or "",
            FLAGS_KEY: ",".join(verdict["flags"]),
            **prm_extra,
        }
        if self.overlong is not None:
            extra["overlong"] = overlong_penalty(length, *self.overlong)
            score += extra["overlong"]
        extra["score"] = score
        outcome = verdict_outcome(verdict, failure is not None)
        if not math.isnan(outcome):
            extra["solved"] = extra["acc"] = outcome
        if not self.settings["token_level"]:
            extra.update(unused_turns(verdict["turns"]))
            return {"reward_score": self.settings["w_global"] * score, "reward_extra_info": extra}
        span_local = local_token_values(verdict["local"], token_spans, len(text))
        if trajectories:  # S of the verdict's trajectories entry for the last output
            span_local = span_local + trajectory_local(verdict, len(data) - 1, token_spans, len(text))
        local, turn_extra = with_turn_values(span_local, verdict["turns"], mask)  # S^span + S^turn, then the clip
        local = clip_local(local, self.settings["local_clip"])
        extra.update(turn_extra)
        extra[LOCAL_SIGNAL_KEY] = float(np.any(local != 0))
        format_score = verdict_format(verdict, failure is not None)

        def form(local: np.ndarray, spans: np.ndarray, text: str):
            """`reward_score` of one response: its token rewards, with the named streams when estimated."""
            token_rewards = compose_token_rewards(score, local, self.settings["w_global"], self.settings["w_local"])
            if not self.streams:
                return token_rewards.tolist()
            streams = token_streams(self.streams, score, local, spans, text, outcome, format_score)
            return {"token_rewards": token_rewards.tolist(), "streams": streams}

        reward_score = session_reward_score(
            form(local, token_spans, text), trajectories, verdict,
            lambda s, t: form(clip_local(s, self.settings["local_clip"]), t.token_spans, t.text),
        )
        return {"reward_score": reward_score, "reward_extra_info": extra}
