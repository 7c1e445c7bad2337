"""Belief probes of GRPO-VPS: where to cut a rollout, what to append, and what the rollout server says about it.

After a rollout is generated, the agent loop (`verl_bot.vps.agent_loop`) calls `probe_rollout`: the cuts (tau_0 = 0
plus up to `max_cuts` positions of the reasoning region, `surprisal` or `uniform`), one probe per cut (prompt +
response[:tau_k] + template prefix + answer + template suffix, the answer and suffix scored), sent concurrently to
the same rollout server with `prompt_logprobs` (the per-engine parameters: `verl_bot.advantage.vps.probe_params`),
and one small record per rollout (`cuts`, `logp` = b_k, cost, `status`) that the `vps` estimator reads. Rows without
probes keep GRPO's advantage. The cut rule, the probes, every `status` and the cost: docs/ALGORITHMS.md, sections
GRPO-VPS and GRPO-VPS in a verl run.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl_bot.advantage.vps import VPSSettings
from verl_bot_contract.think import split_think

ANSWER = "{answer}"
TEMPLATES = {
    "final": "\n\n<final>{answer}</final>",  # this project's AIME / toy_math prompts
    "boxed": "\n\n**Final Answer**\n\\boxed{{answer}}",  # verl's math data (the closest public probe: SPAE)
}
FINAL_SOURCES = frozenset({"aime", "toy_math"})
def choose_template(setting: str, data_source: str = "", prompt_text: str = "") -> tuple[str, str]:
    """(name, template with one `{answer}`) for a row: a preset, a custom string, or `auto`.

    auto: `final` when the prompt asks for `<final>` (or the data_source is aime/toy_math and the prompt names no
    format), `boxed` when it asks for `\\boxed` and otherwise.
    """
    if setting in TEMPLATES:
        return setting, TEMPLATES[setting]
    if setting != "auto":
        return "custom", setting
    if "<final>" in prompt_text:
        return "final", TEMPLATES["final"]
    if "\\boxed" in prompt_text or str(data_source) not in FINAL_SOURCES:
        return "boxed", TEMPLATES["boxed"]
    return "final", TEMPLATES["final"]


@dataclass(frozen=True)
class AnswerProbe:
    """The tokens appended after a cut: `prefix_ids` (conditioned on), then `scored_ids` (answer + suffix)."""

    prefix_ids: list[int]
    scored_ids: list[int]
    marker: str  # the answer region of a response starts at its first occurrence (e.g. "<final>", "\\boxed{")


def answer_probe(tokenizer: Any, template: str, answer: str) -> AnswerProbe:
    """Tokenize `template` with `answer` in place; the scored tokens are those the answer's text changes.

    The whole text is tokenized once (canonical merges); the prefix is the longest run of tokens it shares with
    the template text before `{answer}`.
    """
    before, after = template.split(ANSWER)
    full = tokenizer.encode(before + answer + after, add_special_tokens=False)
    alone = tokenizer.encode(before, add_special_tokens=False) if before else []
    n = 0
    while n < min(len(full), len(alone)) and full[n] == alone[n]:
        n += 1
    lines = before.strip().splitlines()
    return AnswerProbe(full[:n], full[n:], lines[-1].strip() if lines else "")


def reasoning_length(tokenizer: Any, response_ids: Sequence[int], marker: str) -> int:
    """Tokens before the answer region: the index of the token that writes the first `marker` character after the
    response's think block (`verl_bot_contract.think.split_think`; the whole response when there is none).

    len(response_ids) when the marker is absent there (or empty). Binary search over prefix decodes (O(log n)
    decodes).
    """
    ids = list(response_ids)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    pos = text.find(marker, split_think(text).end) if marker else -1
    if pos < 0:
        return len(ids)
    lo, hi = 1, len(ids)  # smallest m with len(decode(ids[:m])) > pos
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(ids[:mid], skip_special_tokens=False)) > pos:
            hi = mid
        else:
            lo = mid + 1
    return lo - 1


def choose_cuts(logprobs: Sequence[float] | None, limit: int, settings: VPSSettings) -> list[int]:
    """Cut positions tau_1 < tau_2 < ... in [min_gap, limit), pairwise >= min_gap apart, at most max_cuts.

    Args:
        logprobs: (L,) the rollout's sampled-token log-probs (surprisal rule); None: no cuts for that rule.
        limit: tokens of the reasoning region (cuts stay before it ends).
    """
    gap, most = settings.min_gap, settings.max_cuts
    if most == 0 or limit <= gap:
        return []
    if settings.cut_rule == "uniform":
        step = max(gap, math.ceil(limit / (most + 1)))
        return list(range(step, limit, step))[:most]
    if logprobs is None or len(logprobs) < limit:
        return []
    surprisal = -np.asarray(logprobs[:limit], dtype=np.float64)
    ranked = sorted(range(limit), key=lambda t: (-surprisal[t], t))  # highest surprisal first, then earliest
    candidates = [t for t in ranked[: math.ceil(settings.cut_quantile * limit)] if t >= gap]
    cuts: list[int] = []
    for t in candidates:
        if all(abs(t - c) >= gap for c in cuts):
            cuts.append(t)
            if len(cuts) == most:
                break
    return sorted(cuts)


def scored_logprob(prompt_logprobs: Sequence[Sequence[float]], length: int, num_scored: int) -> float:
    """log p of the last `num_scored` tokens of a sequence of `length` tokens from its `prompt_logprobs`.

    Entry j (a list whose first value is the log-prob of the actual token j + 1, as verl's vLLM/SGLang servers
    return with `prompt_logprobs=0`) -> sum of entries length - num_scored - 1 .. length - 2.
    """
    if len(prompt_logprobs) != length:
        raise ValueError(f"prompt_logprobs has {len(prompt_logprobs)} entries for a probe of {length} tokens")
    values = [float(entry[0]) for entry in prompt_logprobs[length - num_scored - 1 : length - 1]]
    total = math.fsum(values)
    if math.isnan(total) or total > 0:
        raise ValueError(f"invalid answer log-prob {total} from prompt_logprobs")
    return total


Generate = Callable[[list[int]], Awaitable[Any]]  # probe ids -> verl TokenOutput (extra_fields["prompt_logprobs"])


async def probe_rollout(
    generate: Generate,
    *,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    response_logprobs: Sequence[float] | None,
    answer: str | None,
    template: str,
    tokenizer: Any,
    settings: VPSSettings,
    max_model_len: int,
) -> dict:
    """Probe one rollout (its statuses: docs/ALGORITHMS.md, GRPO-VPS in a verl run); returns its record (never
    raises for a server fault).

    Record: status, cuts (tau_k), logp (b_k, same length), skipped (probes that did not fit), probe_tokens (tokens
    sent), probe_s (seconds), t0/t1 (wall clock around the probes), error (probe_failed only).
    """
    record: dict[str, Any] = {"status": "ok", "cuts": [], "logp": [], "skipped": 0, "probe_tokens": 0}
    if answer is None:
        record["status"] = "no_ground_truth"
        return record
    if not response_ids:
        record["status"] = "empty_response"
        return record
    probe = answer_probe(tokenizer, template, answer)
    limit = reasoning_length(tokenizer, response_ids, probe.marker)
    cuts = [0, *choose_cuts(response_logprobs, limit, settings)]
    head, tail = list(prompt_ids), probe.prefix_ids + probe.scored_ids
    sequences = [head + list(response_ids[:cut]) + tail for cut in cuts]
    fits = [len(seq) < max_model_len for seq in sequences]  # one token of room, as the servers require
    record["skipped"] = fits.count(False)
    cuts = [cut for cut, ok in zip(cuts, fits, strict=True) if ok]
    sequences = [seq for seq, ok in zip(sequences, fits, strict=True) if ok]
    if not sequences:
        record["status"] = "too_long"
        return record
    record["probe_tokens"] = sum(len(seq) for seq in sequences)
    record["t0"] = time.time()
    start = time.perf_counter()
    outputs = await asyncio.gather(*(generate(seq) for seq in sequences), return_exceptions=True)
    record["probe_s"] = time.perf_counter() - start
    record["t1"] = time.time()
    try:
        logp = []
        for seq, out in zip(sequences, outputs, strict=True):
            if isinstance(out, BaseException):
                raise out
            found = (getattr(out, "extra_fields", None) or {}).get("prompt_logprobs")
            if found is None:
                raise ValueError("the rollout server answered without prompt_logprobs")
            logp.append(scored_logprob(found, len(seq), len(probe.scored_ids)))
    except Exception as exc:  # noqa: BLE001 - a server fault is this rollout's status, never a crash of the loop
        record.update(status="probe_failed", error=f"{type(exc).__name__}: {exc}"[:500])
        return record
    record["cuts"], record["logp"] = cuts, logp
    return record
