"""GRPO-VPS: segment-wise progress from the model's belief in the correct answer (arXiv 2604.20659).

`vps_advantage` and its verl adapter `compute_vps_advantage` (`algorithm.adv_estimator=vps`), the knobs
(`VPSSettings`, `+algorithm.vps_*`), the probes' sampling parameters per engine (`probe_params`), the start-up
check and the metrics. The cuts and probes are `verl_bot.vps.probing`'s; here each segment's progress
D_k = v_{k+1} - v_k of the probed belief v is z-scored over the group's segments (std floored) and added to
GRPO's advantage on the segment's tokens:

    A_{i,t} = A^GRPO_i + alpha * D~_{i,k(t)}

The formulas, what is the paper's and what ours, the floor's measurement, edge cases and cost: docs/ALGORITHMS.md,
sections GRPO-VPS and GRPO-VPS in a verl run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.utils.groupwise import as_torch_index

from verl_bot.advantage.groups import group_sum, raise_for_rows
from verl_bot.credit.context import current, report_metrics
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import MethodSettings, knob

PROBE_FIELD = "verl_bot_vps"
AGENT_LOOP = "vps_single_turn"
EPS = 1e-6
DEFAULT_STD_FLOOR = 0.05  # measured on toy_math (docs/ALGORITHMS.md, GRPO-VPS)
OUTCOME_KEYS = ("solved", "acc")  # reward_extra_info: the bot manager's `solved`, verl's math scorers' `acc`
# a probe's sampling parameters: the common ones (verl's vLLM and SGLang servers translate `max_tokens` and
# `prompt_logprobs`), then each engine's own (`actor_rollout_ref.rollout.name`; hf: verl-bot's CPU server)
PROBE_PARAMS = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
ENGINE_PARAMS: dict[str, dict[str, Any]] = {
    "vllm": {"detokenize": False},  # vLLM's SamplingParams: do not detokenize the one sampled token
    "sglang": {},  # verl hands the rest to SGLang's SamplingParams, which has no `detokenize`
    "hf": {},
}


def _one_answer_slot(template: str) -> bool:
    return template.count("{answer}") == 1


@dataclass(frozen=True)
class VPSSettings(MethodSettings, prefix="vps_", label="GRPO-VPS"):
    """The knobs of GRPO-VPS, read from verl's `algorithm` config as `+algorithm.vps_<name>=...`.

    Used by the agent loop (cuts, template) and by the estimator (alpha, space, normalize, log_floor).
    """

    alpha: float = knob(0.5, bounds="[0, inf)", source="ours", doc="weight of the progress term")
    cut_rule: str = knob(
        "surprisal", choices=("surprisal", "uniform"), source="ours",
        doc="surprisal: highest -log p of the sampled tokens; uniform: evenly spaced",
    )
    cut_quantile: float = knob(
        0.1, bounds="(0, 1]", source="ours", doc="surprisal: candidates are the top q of the reasoning tokens"
    )
    max_cuts: int = knob(8, bounds="[0, inf)", source="ours", doc="cuts per rollout besides tau_0 = 0")
    min_gap: int = knob(64, bounds="[1, inf)", source="ours", doc="tokens between cuts (and from the start)")
    template: str = knob(
        "auto", choices=("auto", "final", "boxed"), other=("a text with one {answer}", _one_answer_slot),
        source="ours", doc="the answer appended at a cut (`verl_bot.vps.probing.choose_template`)",
    )
    space: str = knob("prob", choices=("prob", "log"), source="ours", doc="prob: v = p(a*); log: v = log p(a*)")
    normalize: str = knob(
        "group", choices=("group", "none"), source="ours", doc="group: z-score progress over the group's segments"
    )
    log_floor: float = knob(-20.0, bounds="(-inf, 0)", source="ours", doc="space=log: lower clamp of every value")
    std_floor: float = knob(
        DEFAULT_STD_FLOOR, bounds="[0, inf)", source="ours", doc="normalize=group: the std is max(std, std_floor)"
    )


def answer_text(ground_truth: Any) -> str | None:
    """The answer to probe for: a string or number ground truth, stripped; None otherwise (dict, list, bool, empty)."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, (str, int, float, np.integer, np.floating)):
        return None
    text = str(ground_truth).strip()
    return text or None


def probe_params(engine: str) -> dict[str, Any]:
    """The sampling parameters of a probe on the rollout engine `engine` (a new dict).

    Raises VerlBotConfigError for an engine whose verl server returns no `prompt_logprobs` (trtllm) or that
    is unknown (also at start-up: `startup_problem`).
    """
    if engine not in ENGINE_PARAMS:
        raise VerlBotConfigError(
            f"adv_estimator=vps reads the answer's log-prob from prompt_logprobs, which verl 0.9.1's "
            f"actor_rollout_ref.rollout.name={engine} server does not return; use {', '.join(ENGINE_PARAMS)}"
        )
    return {**PROBE_PARAMS, **ENGINE_PARAMS[engine]}


def files_without_answers(paths: Iterable[str]) -> list[str]:
    """The parquet files among `paths` in which no row has a ground truth GRPO-VPS can probe for
    (`reward_model.ground_truth`, a string or a number: `answer_text`)."""
    import pyarrow.parquet as pq

    bad = []
    for path in paths:
        rows = []
        if "reward_model" in pq.read_schema(path).names:
            rows = pq.read_table(path, columns=["reward_model"]).column("reward_model").to_pylist()
        if not any(isinstance(r, dict) and answer_text(r.get("ground_truth")) for r in rows):
            bad.append(path)
    return bad


def startup_problem(config: Any, train_files: list[str]) -> str | None:
    """Why `adv_estimator=vps` cannot run with verl's composed `config` (one line), or None: no ground truth to
    probe for in any row of a local parquet file among `train_files`, a rollout engine whose verl server returns
    no `prompt_logprobs`, or another agent loop than the one that writes the probes."""
    no_answers = files_without_answers(train_files)
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


# ------------------------------------------------------------------------------------------ the math
def belief_values(logp: torch.Tensor, space: str, log_floor: float) -> torch.Tensor:
    """Probe log-probs (any shape, -inf allowed) -> belief values: exp(logp) (prob) or max(logp, floor) (log)."""
    return torch.exp(logp) if space == "prob" else logp.clamp(min=log_floor)


def outcome_values(solved: torch.Tensor, space: str, log_floor: float) -> torch.Tensor:
    """(B,) solved in [0, 1] (NaN: unknown) -> (B,) float64 value after the last segment, NaN kept."""
    solved = solved.double()
    if space == "prob":
        return solved
    return torch.where(torch.isnan(solved), solved, torch.log(solved).clamp(min=log_floor))


def segment_progress(values: torch.Tensor, num_segments: torch.Tensor, end_value: torch.Tensor) -> torch.Tensor:
    """Progress D of each segment: the next boundary's value minus this one's.

    Args:
        values: (B, S) value at the start of each segment; entries k >= num_segments[i] are ignored.
        num_segments: (B,) long, n_i (0 = no segments).
        end_value: (B,) value after the last segment; NaN = unknown, and the last segment's progress is then 0.

    Returns:
        (B, S) float64 progress, 0 beyond each row's segments: a difference of beliefs near 1 keeps its digits (in
        float32, the z-scores of the progresses 1 - exp(-15) and 1 - exp(-13) came out +-0.4958 instead of +-0.4942).
    """
    batch, width = values.shape
    k = torch.arange(width, device=values.device).expand(batch, width)
    valid = k < num_segments[:, None]
    last = k == (num_segments[:, None] - 1)
    values = values.double()
    next_value = torch.cat([values[:, 1:], values.new_zeros(batch, 1)], dim=1)
    last_value = values.gather(1, (num_segments - 1).clamp(min=0)[:, None]).squeeze(1)
    end = torch.where(torch.isnan(end_value), last_value, end_value)
    next_value = torch.where(last, end[:, None].double(), next_value)
    return torch.where(valid, next_value - values, 0.0)


def normalize_progress(
    progress: torch.Tensor,
    num_segments: torch.Tensor,
    index: Sequence,
    eps: float = EPS,
    std_floor: float = DEFAULT_STD_FLOOR,
) -> tuple[torch.Tensor, float]:
    """z-score progress over all segments of each group (population std, floored): (B, S) -> (B, S).

    Args:
        progress: (B, S) D of each segment; entries k >= num_segments[i] are ignored. num_segments: (B,) long.
        index: (B,) group labels. eps: added to the std. std_floor: the std used is max(std, std_floor).

    Returns:
        (B, S) float32 D~, 0 beyond the segments (a group whose segments all made the same progress, or that has
        one segment, gets 0); and the floor's share: among the groups with >= 2 segments, the share whose std is
        below `std_floor` (where the floor binds), 0 without such groups.

    The statistics are float64: a float32 group mean of two progresses 6e-8 apart rounds onto one of them, and
    the z-score of the pair came out (0, 0.057) instead of (-0.029, +0.029).
    """
    batch, width = progress.shape
    valid = torch.arange(width, device=progress.device).expand(batch, width) < num_segments[:, None]
    group = as_torch_index(index, device=progress.device)
    num_groups = int(group.max()) + 1 if batch else 0
    segments = group_sum(num_segments.double(), group, num_groups)
    count = segments.clamp(min=1.0)
    d = torch.where(valid, progress.double(), 0.0)
    mean = group_sum(d.sum(dim=1), group, num_groups) / count
    centered = torch.where(valid, d - mean[group][:, None], 0.0)
    std = (group_sum((centered**2).sum(dim=1), group, num_groups) / count).sqrt()
    comparable = segments >= 2
    share = float((comparable & (std < std_floor)).sum()) / max(float(comparable.sum()), 1.0)
    return (centered / (std.clamp(min=std_floor)[group][:, None] + eps)).float(), share


def token_progress(progress: torch.Tensor, starts: torch.Tensor, num_segments: torch.Tensor, width: int):
    """Spread each segment's progress over its tokens.

    Args:
        progress: (B, S) per segment. starts: (B, S) long, first token of each segment (starts[:, 0] = 0,
            increasing; ignored beyond num_segments). num_segments: (B,) long. width: T.

    Returns:
        (B, T): progress[i, k] on tokens starts[i, k] .. starts[i, k + 1] - 1 (the last segment runs to T); 0 on rows
        without segments.
    """
    batch, segs = starts.shape
    valid = torch.arange(segs, device=starts.device).expand(batch, segs) < num_segments[:, None]
    t = torch.arange(width, device=starts.device)
    begun = (starts[:, None, :] <= t[None, :, None]) & valid[:, None, :]  # (B, T, S)
    seg = begun.sum(dim=2) - 1  # (B, T) segment of each token, -1 on rows without segments
    out = progress.gather(1, seg.clamp(min=0))
    return torch.where(seg >= 0, out, 0.0)


@torch.no_grad()
def vps_advantage(
    trajectory_advantages: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence,
    starts: torch.Tensor,
    logp: torch.Tensor,
    num_segments: torch.Tensor,
    solved: torch.Tensor,
    alpha: float = 0.5,
    space: str = "prob",
    normalize: str = "group",
    log_floor: float = -20.0,
    std_floor: float = DEFAULT_STD_FLOOR,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """GRPO-VPS per-token advantages (docs/ALGORITHMS.md, section GRPO-VPS).

    Args:
        trajectory_advantages: (B, T) GRPO's advantage of each row on its tokens.
        response_mask: (B, T) 1 on response tokens.
        index: (B,) group label of each row (verl's `uid`).
        starts: (B, S) long, first token of each segment (tau_k); starts[:, 0] = 0.
        logp: (B, S) probe log-prob b_{i,k} at each segment start; ignored beyond num_segments.
        num_segments: (B,) long, n_i in 0..S (0: the row has no probes and keeps GRPO's advantage).
        solved: (B,) outcome in [0, 1], NaN when unknown.
        alpha, space, normalize, log_floor, std_floor: `VPSSettings`.

    Returns:
        advantages: (B, T) float32, 0 on padding. progress: (B, T) the (normalized) progress D~ of each token.
        floor_share: among the groups with >= 2 segments, the share whose std the floor replaced (0 without
        such groups, or with normalize=none).
    """
    if not (trajectory_advantages.shape == response_mask.shape and trajectory_advantages.dim() == 2):
        raise ValueError(
            f"vps advantage: trajectory_advantages {tuple(trajectory_advantages.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must be the same (B, T) shape"
        )
    if not (starts.shape == logp.shape and starts.shape[0] == response_mask.shape[0] == num_segments.shape[0]):
        raise ValueError(f"vps advantage: starts {tuple(starts.shape)} and logp {tuple(logp.shape)} must be (B, S)")
    if index is None or len(index) != response_mask.shape[0]:
        raise ValueError("vps advantage needs one group id (uid) per row")
    batch, width = response_mask.shape
    mask = response_mask != 0
    floor_share = 0.0
    if batch == 0 or starts.shape[1] == 0:
        progress = torch.zeros(batch, width)
    else:
        segs = torch.arange(starts.shape[1]).expand_as(starts) < num_segments[:, None]
        raise_for_rows("vps advantage: NaN probe log-probs", (torch.isnan(logp) & segs).any(dim=1), index)
        values = torch.where(segs, belief_values(logp.double(), space, log_floor), 0.0)
        delta = segment_progress(values, num_segments, outcome_values(solved, space, log_floor))
        if normalize == "group":
            delta, floor_share = normalize_progress(delta, num_segments, index, std_floor=std_floor)
        progress = token_progress(delta.float(), starts, num_segments, width)
    progress = torch.where(mask, progress, 0.0)
    advantages = torch.where(mask, trajectory_advantages.float() + alpha * progress, 0.0)
    return advantages, progress, floor_share


# ------------------------------------------------------------------------------------- verl adapter
def outcome_of(row: Mapping[str, Any]) -> float:
    """A row's solved flag in [0, 1] from its `reward_extra_info` (`solved`, else `acc`); NaN when absent."""
    info = row.get("reward_extra_info") or {}
    for key in OUTCOME_KEYS:
        value = info.get(key)
        if value is not None:
            try:
                value = float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(value):
                return min(max(value, 0.0), 1.0)
    return math.nan


def probe_tensors(rows: Sequence[Mapping[str, Any]]):
    """The probe records of the batch's rows as tensors.

    Returns: starts (B, S) long, logp (B, S) float32, num_segments (B,) long, solved (B,) float32, records (the
    per-row `PROBE_FIELD` dicts). Raises `VerlBotConfigError` when a row has no record (not our agent loop).
    """
    records = []
    for i, row in enumerate(rows):
        record = row.get(PROBE_FIELD)
        if not isinstance(record, Mapping):
            raise VerlBotConfigError(
                f"adv_estimator=vps: row {i} has no probe results ({PROBE_FIELD} in its extra_fields); they are "
                f"written by the agent loop: set actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP}"
            )
        records.append(record)
    width = max([len(r.get("cuts") or []) for r in records], default=0)
    starts = torch.zeros(len(rows), width, dtype=torch.long)
    logp = torch.zeros(len(rows), width)
    num = torch.zeros(len(rows), dtype=torch.long)
    for i, r in enumerate(records):
        cuts, lps = list(r.get("cuts") or []), list(r.get("logp") or [])
        if len(cuts) != len(lps):
            raise ValueError(f"vps: row {i}: {len(cuts)} cuts but {len(lps)} probe log-probs")
        num[i] = len(cuts)
        starts[i, : len(cuts)] = torch.tensor(cuts, dtype=torch.long)
        logp[i, : len(cuts)] = torch.tensor(lps, dtype=torch.float32)
    solved = torch.tensor([outcome_of(row) for row in rows], dtype=torch.float32)
    return starts, logp, num, solved, records


def probe_metrics(records: Sequence[Mapping[str, Any]], num_segments: torch.Tensor, solved: torch.Tensor) -> dict:
    """The probing cost and coverage of a batch, from the agent loop's records (docs/ALGORITHMS.md, GRPO-VPS)."""
    n = max(len(records), 1)
    status = [str(r.get("status", "")) for r in records]
    t0 = [float(r["t0"]) for r in records if r.get("t0") is not None]
    t1 = [float(r["t1"]) for r in records if r.get("t1") is not None]
    probed = num_segments > 0
    return {
        "vps/probe_tokens_per_rollout": sum(float(r.get("probe_tokens", 0)) for r in records) / n,
        "vps/probes_per_rollout": float(num_segments.sum()) / n,
        "vps/probe_s_per_rollout": sum(float(r.get("probe_s", 0.0)) for r in records) / n,
        "vps/gen_s_per_rollout": sum(float(r.get("gen_s", 0.0)) for r in records) / n,
        "vps/probe_time_s": (max(t1) - min(t0)) if t0 and t1 else 0.0,
        "vps/probed_rows": float(probed.sum()),
        "vps/no_ground_truth_rows": float(sum(s == "no_ground_truth" for s in status)),
        "vps/probe_failed_rows": float(sum(s == "probe_failed" for s in status)),
        "vps/skipped_long_probes": sum(float(r.get("skipped", 0)) for r in records),
        "vps/no_outcome_rows": float((probed & torch.isnan(solved)).sum()),
    }


def compute_vps_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl adapter of `vps_advantage` (registered as `algorithm.adv_estimator=vps`).

    The trajectory advantage is verl's own `grpo` estimator (its registry entry, with
    `algorithm.norm_adv_by_std_in_grpo`), so alpha = 0 is exactly GRPO. The probe results are each row's
    `extra_fields[PROBE_FIELD]` in the batch context (`verl_bot.credit.context`); knobs: `VPSSettings`.

    Args:
        token_level_rewards: (B, T). response_mask: (B, T). index: (B,) uids.

    Returns:
        (advantages, returns): both (B, T), returns = advantages (as verl's GRPO).
    """
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    settings = VPSSettings.from_config(config)
    get = config.get if config is not None else (lambda key, default=None: default)
    grpo, _ = get_adv_estimator_fn("grpo")(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        norm_adv_by_std_in_grpo=bool(get("norm_adv_by_std_in_grpo", True)),
        config=config,
    )
    ctx = current()
    if ctx is None or len(ctx.rows) != response_mask.shape[0]:
        raise VerlBotConfigError(
            "adv_estimator=vps reads each row's probe results from verl-bot's batch context, which is set in "
            "verl's v1 trainer (trainer.use_v1=true) with verl-bot installed"
        )
    starts, logp, num, solved, records = probe_tensors(ctx.rows)
    eligible = [r for r in records if r.get("status") not in ("no_ground_truth", "empty_response")]
    if eligible and all(r.get("status") == "probe_failed" for r in eligible):
        error = next((r.get("error") for r in reversed(eligible) if r.get("error")), "(no message)")
        raise VerlBotConfigError(
            f"adv_estimator=vps: every probe of this batch failed ({len(eligible)} rollouts); the rollout server "
            f"must answer prompt_logprobs requests (vLLM, SGLang, verl-bot's hf). Last error: {error}"
        )
    advantages, progress, floor_share = vps_advantage(
        grpo, response_mask, index, starts, logp, num, solved,
        alpha=settings.alpha, space=settings.space, normalize=settings.normalize, log_floor=settings.log_floor,
        std_floor=settings.std_floor,
    )
    mask = response_mask != 0
    metrics = probe_metrics(records, num, solved)
    metrics["vps/progress_abs_mean"] = float(progress.abs()[mask].mean()) if mask.any() else 0.0
    metrics["vps/floor_share"] = floor_share
    report_metrics(metrics)
    return advantages, advantages
