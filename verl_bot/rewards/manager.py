"""The `bot` reward manager (`reward.reward_manager.name=bot`): scorer verdicts -> dense per-token rewards for verl's
reward loop.

For each rollout `run_single` decodes its outputs into a `TokenLayout`, calls the scorer chosen by the row's
`data_source` (its own `scorers` entry, else verl's reward functions: `verl_bot.rewards.verl_scorer`), parses the
verdict once (`verl_bot.credit.verdict`) and hands both to `verl_bot.credit.token_credit`, which composes
r_t = w_g * G + w_s * S_t and the named streams; knobs in `verl_bot.rewards.settings.ManagerSettings`. A
configuration error is not raised here (verl would tag the group failed and train on): the response gets a zero
reward carrying `verl_bot.errors.FATAL_KEY`, which stops the run. Where G and S come from, what it reports, the
knobs: docs/verl_setup.md (Where G and S come from, What the manager reports), docs/knobs.md, docs/run_safety.md.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from verl_bot.credit.sessions import fingerprint, response_ids, response_length, trajectories_request, trajectory_ids
from verl_bot.credit.spans import token_char_spans
from verl_bot.credit.token_credit import OutputLayout, TokenLayout, token_credit
from verl_bot.credit.turns import multi_turn_info, rollout_mask, turn_request
from verl_bot.credit.verdict import ScorerFailure, Verdict, validate_verdict
from verl_bot.errors import FATAL_KEY, VerlBotConfigError
from verl_bot.rewards.prm import PrmClient, prm_metrics, prm_settings
from verl_bot.rewards.scorers import ScorerNotConfigured, build_scorers
from verl_bot.rewards.settings import manager_settings
from verl_bot.rewards.verl_scorer import VerlFunctionScorer

logger = logging.getLogger("verl_bot")


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
    """Token-level reward manager: one scorer call per rollout, dense rewards out (`token_credit`)."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        self.settings = settings = manager_settings(config)
        self.credit = settings.credit(overlong_settings(config))
        self.scorers = build_scorers(settings.scorers, timeout_s=settings.timeout_s, retries=settings.retries)
        self.verl_scorer = VerlFunctionScorer(
            config, compute_score, workers=settings.fn_workers, timeout_s=settings.timeout_s,
            reward_router_address=reward_router_address, reward_model_tokenizer=reward_model_tokenizer,
        )
        prm = prm_settings(config) if settings.per_token else None  # S from a served PRM (docs/prm.md)
        rm_path = ((config.get("reward") or {}).get("reward_model") or {}).get("model_path")
        self.prm = None if prm is None else PrmClient.from_settings(
            prm, reward_router_address, reward_model_tokenizer, rm_path,
            timeout_s=settings.timeout_s, retries=settings.retries,
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

    async def _verdict(self, data_source: str, request: dict, layout: TokenLayout) -> Verdict | ScorerFailure:
        """The scorer's verdict, validated against the rollout's turns and outputs, or its failure.

        A `VerlBotConfigError` (no scorer, credentials refused) is raised: no retry or sentinel can fix it.
        """
        scorer = self._scorer_for(data_source)
        try:
            if getattr(scorer, "self_timed", False):  # verl_scorer's worker processes kill a call past timeout_s
                raw = await scorer.score(request)  # (their start-up and the queue are not the call's time)
            else:
                raw = await asyncio.wait_for(scorer.score(request), timeout=self.settings.timeout_s)
            return validate_verdict(raw, layout.turn_count, len(layout.outputs))
        except VerlBotConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - any other scorer failure becomes the documented sentinel
            message = f"{type(exc).__name__}: {exc}"
            logger.warning("scorer for %s failed (%s); sentinel reward", data_source, message)
            return ScorerFailure(message[:500])

    async def _verdict_and_prm(
        self, data_source: str, request: dict, layout: TokenLayout
    ) -> tuple[Verdict | ScorerFailure, dict]:
        """`_verdict`, with the PRM's call alongside where it gives S (`verl_bot.rewards.prm`): the verdict's local
        spans replaced by (or added to) the PRM's, a PRM fault a scorer failure; plus the PRM's metrics."""
        if self.prm is None or not self.prm.covers(data_source):
            metrics = {} if self.prm is None else prm_metrics(None, False)
            return await self._verdict(data_source, request, layout), metrics
        scored, prm = await asyncio.gather(
            self._verdict(data_source, request, layout),
            asyncio.wait_for(self.prm.score(request["prompt"], request["response"]), self.settings.timeout_s),
            return_exceptions=True,
        )
        for outcome in (scored, prm):  # a cancellation or a configuration error (fatal marker) goes up
            if isinstance(outcome, VerlBotConfigError) or (
                isinstance(outcome, BaseException) and not isinstance(outcome, Exception)
            ):
                raise outcome
        if isinstance(prm, Exception):
            message = f"prm: {type(prm).__name__}: {prm}"
            logger.warning("the PRM failed for %s (%s); sentinel reward", data_source, message)
            return ScorerFailure(message[:500]), prm_metrics(None, True)
        if isinstance(scored, ScorerFailure):
            return scored, prm_metrics(prm, False)
        return prm.applied(scored, self.prm.settings.combine), prm_metrics(prm, False)

    def _fatal(self, message: str, length: int) -> dict:
        """A zero reward carrying the marker that stops the run (`verl_bot.errors`)."""
        logger.error("%s", message)
        zeros = [0.0] * length
        info = {FATAL_KEY: message, "scorer_failed": 1.0}
        if self.credit.layout == "scalar":
            return {"reward_score": 0.0, "reward_extra_info": info}
        if not self.credit.streams:
            return {"reward_score": zeros, "reward_extra_info": info}
        streams = dict.fromkeys(self.credit.streams, zeros)
        return {"reward_score": {"token_rewards": zeros, "streams": streams}, "reward_extra_info": info}

    async def _layout(self, data: DataProto) -> TokenLayout:
        """The rollout's outputs as tokens: each row's text and token spans (decoded in the event loop's executor),
        the last row's response mask (`turns.rollout_mask`: `VerlBotConfigError` for a multi-turn row without one)
        and, for a multi-output session (`verl_bot.credit.sessions`), each row's fingerprint."""
        item, last = data[-1], len(data) - 1
        fields, num_turns = (item.non_tensor_batch.get(k) for k in ("tool_extra_fields", "__num_turns__"))
        mask = rollout_mask(fields, num_turns, response_length(data, last))
        loop = asyncio.get_running_loop()
        outputs = []
        for row in range(len(data)):
            text, spans = await loop.run_in_executor(None, token_char_spans, self.tokenizer, response_ids(data, row))
            key = fingerprint(*trajectory_ids(data, row)) if len(data) > 1 else None
            outputs.append(OutputLayout(text, spans, mask if row == last else None, key))
        return TokenLayout(tuple(outputs))

    def _request(self, item: Any, layout: TokenLayout) -> dict:
        """The scorer's request (docs/REWARD_API.md): the prompt, the last output's text, the ground truth, the
        row's `extra_info` with verl's multi-turn fields, the turns and a session's outputs."""
        reward_model = item.non_tensor_batch.get("reward_model") or {}
        fields, num_turns = (item.non_tensor_batch.get(k) for k in ("tool_extra_fields", "__num_turns__"))
        return {
            "prompt": _prompt_text(item, self.tokenizer),
            "response": layout.last.text,
            "ground_truth": reward_model.get("ground_truth") if isinstance(reward_model, dict) else None,
            "extra_info": {**(item.non_tensor_batch.get("extra_info") or {}), **multi_turn_info(fields, num_turns)},
            **turn_request(layout.last.mask, layout.last.token_spans),
            **trajectories_request([output.text for output in layout.outputs]),
        }

    async def run_single(self, data: DataProto) -> dict:
        """One rollout (a batch of one row, or one row per output of a multi-output session, the last output last):
        its layout, its scorer's verdict (and the PRM's S), then `token_credit`."""
        item = data[-1]
        data_source = str(item.non_tensor_batch.get("data_source", ""))
        try:
            layout = await self._layout(data)
            scored, prm_extra = await self._verdict_and_prm(data_source, self._request(item, layout), layout)
        except VerlBotConfigError as exc:
            return self._fatal(str(exc), response_length(data, len(data) - 1))
        credit = token_credit(scored, layout, self.credit)
        return {"reward_score": credit.reward_score, "reward_extra_info": {**credit.info, **prm_extra}}
