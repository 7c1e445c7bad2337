"""The math (AIME) scorer: answer check + format + step judge -> Eq. 8 global score and local step spans.

Per item (docs/ALGORITHMS.md "AIME rewards", Eq. 8 with the trainer's w_g = w_s = 1):

    G   = answer_weight * 1[correct] + b_format            parts {"answer": ..., "format": ...}
    S_t = local_weight * e_s / |S|   for every character of step s's block (its tags included)

b_format = format_bonus (+0.2) for a perfect format, format_penalty (-1.0) for mismatched tags, format_missing
(-1.0) when the response has no step/final tags at all, format_native (0.0) for a reasoning model's own format
(think block, then a ``\boxed{}`` answer and no tag). |S| = number of steps. The judge runs concurrently
with the answer check; a judge failure drops the local spans, flags ``judge_unavailable`` and keeps G.

Think block (``verl_bot_contract.think``): only the text after it is parsed, extracted and judged; a response
cut off inside it has no answer, format ``missing``, and a part ``think_truncated`` (-0.5): G = -1.5 by default,
below every finished response (flag ``think_truncated``). Without step tags after a closed think block the
answer's paragraphs are the steps (``untagged_steps``); the think block's own local signal is ``think_local``.

Step judges: ``llm`` (any OpenAI-compatible endpoint, ``step_judge.py``) or ``rule`` (integer arithmetic chains,
``rule_judge.py``: the CPU ``toy_math`` task, no endpoint). Without math-verify (``math_verify=False``) no worker
pool starts and only plain integer answers can be correct (integer tasks such as ``toy_math``).
Error sentinel (item could not be scored, e.g. unusable ground truth): G = 0.0 with ``error`` set.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import asdict, dataclass, field, replace

from reward_servers.common.judge import JudgeClient, JudgeConfig, JudgeError
from reward_servers.common.service import ItemResult, ScoreItem, Scorer
from reward_servers.math import __version__
from reward_servers.math.parsing import (
    FORMAT_MISSING,
    FORMAT_NATIVE,
    FORMAT_OK,
    Answer,
    aime_ground_truth,
    as_int_literal,
    brace_depth,
    extract_answer,
    find_steps,
    format_verdict,
    in_aime_range,
    is_prose,
    parse_response,
    problem_text,
)
from reward_servers.math.pool import ItemTimeout, PoolError, WorkerPool
from reward_servers.math.rule_judge import rule_judge_steps
from reward_servers.math.step_judge import STRATEGIES, judge_steps, load_prompts
from verl_bot_contract.think import split_think, think_spans
from verl_bot_contract.verdict import Span

ANSWER_TYPES = ("auto", "aime", "math")
JUDGE_KINDS = ("llm", "rule")
UNTAGGED_STEPS = ("paragraphs", "none")  # steps of an answer without step tags after a closed think block


@dataclass
class MathConfig:
    """Knobs of the math scorer (defaults = the paper's Eq. 8 where it says; see README.md)."""

    answer_weight: float = 3.0
    local_weight: float = 0.5
    format_bonus: float = 0.2
    format_penalty: float = -1.0
    format_missing: float = -1.0
    format_native: float = 0.0  # a closed think block, then a \boxed{} answer and no tag (a reasoning model's own)
    think_opened: bool = False  # the chat template opens <think>: a response without </think> was cut off in it
    think_local: float = 0.0  # local signal S on every character of the think block (0: none)
    think_truncated_penalty: float = -0.5  # part think_truncated of a response cut off inside its think block
    untagged_steps: str = "paragraphs"  # paragraphs | none: steps of an answer after </think> without step tags
    answer_type: str = "auto"  # auto | aime | math
    int_fast_path: bool = True  # plain integer literals compared without a worker round trip
    math_verify: bool = True  # False: no worker pool; only plain integer answers (AIME mode) can be correct
    max_answer_chars: int = 1000
    max_answer_depth: int = 12  # brace nesting; deeper answers are refused (parser bombs)
    verify_timeout_s: int = 3  # math-verify's own (signal.alarm) timeout, per parse/verify call
    item_timeout_s: float = 8.0  # hard wall-clock limit per item in a worker (kill + replace)
    workers: int = 0  # 0: os.cpu_count()
    worker_memory_mb: int = 4096
    chunk: int = 16
    judge_enabled: bool = False
    judge_kind: str = "llm"  # llm: the endpoint in `judge`; rule: arithmetic chains (rule_judge.py), no endpoint
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    strategy: str = "error_propagation"
    window: int = 3
    max_step_chars: int = 4000
    max_steps_judged: int = 64
    prompt_dir: str | None = None
    health_pings_judge: bool = True

    def public(self) -> dict:
        d = asdict(self)
        d["judge"] = {"base_url": self.judge.base_url, "model": self.judge.model}
        return d


def resolve_mode(item: ScoreItem, options: dict, default: str) -> tuple[str, object]:
    """``("aime", int)`` or ``("math", str)`` for the item's ground truth; raises ValueError when unusable.

    Mode: options/extra_info ``answer_type`` else the config's; "auto" means AIME when ``data_source`` mentions
    "aime" or the ground truth is an integer 0-999, else general math.
    """
    mode = options.get("answer_type") or item.extra_info.get("answer_type") or default
    if mode not in ANSWER_TYPES:
        raise ValueError(f"answer_type must be one of {ANSWER_TYPES}")
    gt = item.ground_truth
    if gt is None or (isinstance(gt, str) and not gt.strip()):
        raise ValueError("missing ground_truth")
    if isinstance(gt, dict) and "ground_truth" in gt:  # verl's reward_model dict passed whole
        gt = gt["ground_truth"]
    as_int = aime_ground_truth(gt)
    if mode == "auto":
        source = str(item.extra_info.get("data_source", "")).lower()
        mode = "aime" if "aime" in source or (as_int is not None and in_aime_range(as_int)) else "math"
    if mode == "aime":
        if as_int is None or not in_aime_range(as_int):
            raise ValueError(f"ground truth {str(gt)[:40]!r} is not an AIME integer 0-999")
        return "aime", as_int
    if not isinstance(gt, str | int | float):
        raise ValueError("ground_truth must be a string or a number")
    return "math", str(gt)


def precheck(ans: Answer, cfg: MathConfig, mode: str = "math") -> str | None:
    """Refuse answers math-verify should never see: a flag name, or None when the answer may be parsed."""
    if not ans.text:
        return "empty_answer"
    if len(ans.text) > cfg.max_answer_chars:
        return "answer_too_long"
    if brace_depth(ans.text) > cfg.max_answer_depth or ans.text.count("\\frac") > 4 * cfg.max_answer_depth:
        return "answer_too_complex"
    if mode == "aime" and is_prose(ans.text):
        return "answer_is_prose"
    return None


def format_score(fmt: str, cfg: MathConfig) -> float:
    """b_format of a format verdict."""
    if fmt == FORMAT_OK:
        return cfg.format_bonus
    if fmt == FORMAT_MISSING:
        return cfg.format_missing
    if fmt == FORMAT_NATIVE:
        return cfg.format_native
    return cfg.format_penalty


def think_settings(options: dict, cfg: MathConfig) -> MathConfig:
    """``cfg`` with the per-request think knobs of ``options`` (``think_opened``, ``think_local``,
    ``think_truncated_penalty``, ``untagged_steps``); raises ValueError for a bad one."""
    out = replace(
        cfg,
        think_opened=bool(options.get("think_opened", cfg.think_opened)),
        think_local=float(options.get("think_local", cfg.think_local)),
        think_truncated_penalty=float(options.get("think_truncated_penalty", cfg.think_truncated_penalty)),
        untagged_steps=options.get("untagged_steps", cfg.untagged_steps),
    )
    if out.untagged_steps not in UNTAGGED_STEPS:
        raise ValueError(f"untagged_steps must be one of {UNTAGGED_STEPS}")
    return out


def step_spans(steps: list, scores: list[int], local_weight: float) -> list[Span]:
    """Eq. 8 local signal: value local_weight * e_s / |S| over each step's block span (|S| = len(steps))."""
    n = len(steps)
    return [Span(start=st.start, end=st.end, value=local_weight * e / n)
            for st, e in zip(steps, scores, strict=True) if e and n]


class MathScorer(Scorer):
    name = "math"
    version = __version__
    error_score = 0.0

    def __init__(self, config: MathConfig | None = None):
        self.cfg = config or MathConfig()
        if self.cfg.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        if self.cfg.judge_kind not in JUDGE_KINDS:
            raise ValueError(f"judge_kind must be one of {JUDGE_KINDS}")
        think_settings({}, self.cfg)  # refuses a bad untagged_steps at start
        if not (self.cfg.math_verify or self.cfg.int_fast_path):
            raise ValueError("without math-verify only the integer fast path can check answers: keep int_fast_path")
        self.pool: WorkerPool | None = None
        self.judge: JudgeClient | None = None
        self.judge_stats: Counter = Counter()  # responses judged: step_ok / step_unparseable / step_unavailable
        self.prompts = load_prompts(self.cfg.prompt_dir) if self.cfg.prompt_dir else load_prompts()

    @property
    def rule_judge(self) -> bool:
        return self.cfg.judge_enabled and self.cfg.judge_kind == "rule"

    async def start(self) -> None:
        cfg = self.cfg
        if cfg.judge_enabled and cfg.judge_kind == "llm":
            self.judge = JudgeClient(cfg.judge)
        if not cfg.math_verify:
            return
        self.pool = WorkerPool(
            "reward_servers.math.verify:check",
            n_workers=cfg.workers or os.cpu_count(),
            item_timeout_s=cfg.item_timeout_s,
            chunk=cfg.chunk,
            memory_mb=cfg.worker_memory_mb,
            warmup={"pred": "\\frac{2}{4}", "gold": "0.5", "mode": "math", "timeout_s": 5},
        )
        await asyncio.to_thread(self.pool.start)

    async def stop(self) -> None:
        if self.judge is not None:
            await self.judge.close()
        if self.pool is not None:
            await asyncio.to_thread(self.pool.close)

    async def health(self) -> dict:
        pool_ok = not self.cfg.math_verify or (self.pool is not None and self.pool.healthy())
        out = {"ok": pool_ok, "workers": len(self.pool.pids()) if self.pool else 0}
        out["worker_restarts"] = self.pool.restarts if self.pool else 0
        if self.rule_judge:
            out["judge"] = "rule"
        elif self.judge is not None:
            reachable = await self.judge.ping() if self.cfg.health_pings_judge else True
            out["judge"] = "reachable" if reachable else "unreachable"
            out["ok"] = pool_ok and reachable
        else:
            out["judge"] = "disabled"
        out["judge_stats"] = dict(self.judge_stats)
        return out

    # ------------------------------------------------------------------ answer
    async def check_answer(self, ans: Answer | None, mode: str, gold: object) -> tuple[bool, str | None, list[str]]:
        """(correct, normalised answer or None, flags)."""
        cfg = self.cfg
        if ans is None:
            return False, None, ["no_answer"]
        refused = precheck(ans, cfg, mode)
        if refused:
            return False, None, [refused]
        if mode == "aime" and cfg.int_fast_path:
            v = as_int_literal(ans.text)
            if v is not None:
                if not in_aime_range(v):
                    return False, str(v), ["answer_out_of_range"]
                return v == gold, str(v), []
        if not cfg.math_verify:
            return False, None, ["answer_not_integer"]
        assert self.pool is not None, "scorer not started"
        payload = {"pred": ans.text, "gold": gold, "mode": mode, "timeout_s": cfg.verify_timeout_s}
        try:
            res = await self.pool.submit(payload)
        except ItemTimeout:
            return False, None, ["answer_timeout"]
        except PoolError:
            return False, None, ["answer_check_failed"]
        flags = {"out_of_range": ["answer_out_of_range"], "not_integer": ["answer_not_integer"]}.get(
            res["reason"] or "", ["answer_unparsed"] if res["reason"] == "unparsed" else []
        )
        return bool(res["correct"]), res["value"], flags

    # ------------------------------------------------------------------ score
    async def score(self, item: ScoreItem, options: dict) -> ItemResult:
        """Eq. 8 verdict of the answer after the response's think block (module docstring)."""
        cfg = think_settings(options, self.cfg)
        strategy = options.get("strategy", cfg.strategy)
        window = int(options.get("window", cfg.window))
        use_judge = bool(options.get("judge", True)) and (self.judge is not None or self.rule_judge)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        mode, gold = resolve_mode(item, options, cfg.answer_type)
        if mode != "aime" and not cfg.math_verify:
            raise ValueError("without math-verify only integer (AIME-mode) ground truths can be scored")

        text = item.response
        think = split_think(text, cfg.think_opened)
        parsed = parse_response(text, think.end)
        ans = extract_answer(text, parsed, think.end)
        steps, step_source = find_steps(text, parsed, think, ans, cfg.untagged_steps)
        fmt = format_verdict(parsed, think, ans)
        step_texts = [text[s.text_start : s.text_end] for s in steps]

        async def run_judge():
            if not use_judge or not step_texts:
                return None
            if self.rule_judge:
                return await rule_judge_steps(
                    problem_text(item.prompt), step_texts, strategy=strategy, max_steps=cfg.max_steps_judged
                )
            return await judge_steps(
                self.judge,
                self.prompts,
                problem_text(item.prompt),
                step_texts,
                strategy=strategy,
                window=window,
                max_chars=cfg.max_step_chars,
                max_steps=cfg.max_steps_judged,
            )

        (correct, value, flags), judged = await self._answer_and_judge(ans, mode, gold, run_judge)

        if ans is not None and ans.n_boxed > 1:
            flags.append("multiple_boxed")
        if think.truncated:
            flags.append("think_truncated")
        info_judge: dict = {"strategy": strategy, "window": window} if use_judge else {"enabled": False}
        if use_judge and self.rule_judge:
            info_judge = {"kind": "rule", "strategy": strategy}
        scores: list[int] | None = None
        if isinstance(judged, JudgeError):
            flags.append("judge_unavailable")
            info_judge["error"] = str(judged)[:300]
            self.judge_stats["step_unavailable"] += 1
        elif judged is not None:
            scores = [v.score for v in judged]
            unparseable = any(v.verdict == "unparseable" for v in judged)
            if unparseable:
                flags.append("judge_unparseable")
            self.judge_stats["step_unparseable" if unparseable else "step_ok"] += 1
            if len(steps) > cfg.max_steps_judged:
                flags.append("steps_truncated")

        parts = {"answer": cfg.answer_weight * float(correct), "format": format_score(fmt, cfg)}
        if think.truncated:
            parts["think_truncated"] = cfg.think_truncated_penalty
        steps_info = [
            {
                "index": st.index,
                "start": st.start,
                "end": st.end,
                "score": scores[k] if scores is not None else None,
                **({"verdict": judged[k].verdict} if scores is not None else {}),
            }
            for k, st in enumerate(steps)
        ]
        info = {
            "answer": value,
            "answer_text": ans.text[:200] if ans else None,
            "answer_source": ans.source if ans else None,
            "answer_type": mode,
            "correct": bool(correct),
            "format": fmt,
            "format_problems": parsed.problems[:20],
            "steps": steps_info,
            "step_source": step_source,
            "think": think.info(),
            "judge": info_judge,
        }
        local = step_spans(steps, scores, cfg.local_weight) if scores is not None else []
        local += think_spans(think, cfg.think_local)
        return ItemResult(score=sum(parts.values()), parts=parts, local=local, info=info, flags=flags)

    async def _answer_and_judge(self, ans, mode, gold, run_judge):
        """Answer check and judge concurrently; a judge failure is returned (not raised) as the JudgeError."""

        async def guarded():
            try:
                return await run_judge()
            except JudgeError as e:
                return e

        return await asyncio.gather(self.check_answer(ans, mode, gold), guarded())
