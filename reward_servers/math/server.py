"""The math (AIME) scorer's edge: per item it reads the response, then gathers the answer check (math-verify in a
pool of worker processes, or the integer fast path) and the step judge's verdicts (an LLM behind any
OpenAI-compatible endpoint, ``step_judge.py``, or the rule judge of the CPU ``toy_math`` task, ``rule_judge.py``)
concurrently; ``reward_servers.math.verdict.math_verdict`` turns these facts into the Eq. 8 verdict.

Without math-verify (``math_verify=False``) no worker pool starts and only plain integer answers can be correct
(integer tasks such as ``toy_math``). Error sentinel (item could not be scored, e.g. unusable ground truth): G = 0.0
with ``error`` set.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from reward_servers.common.judge import JudgeClient, JudgeError
from reward_servers.common.service import ItemResult, ScoreItem, Scorer
from reward_servers.math import __version__
from reward_servers.math.config import ANSWER_TYPES, JUDGE_KINDS, MathConfig, think_settings
from reward_servers.math.parsing import (
    Answer,
    aime_ground_truth,
    as_int_literal,
    brace_depth,
    in_aime_range,
    is_prose,
    problem_text,
)
from reward_servers.math.pool import ItemTimeout, PoolError, WorkerPool
from reward_servers.math.rule_judge import rule_judge_steps
from reward_servers.math.step_judge import STRATEGIES, StepVerdict, judge_steps, load_prompts
from reward_servers.math.verdict import AnswerCheck, Judging, MathFacts, Reading, math_verdict, read_response


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

    # ------------------------------------------------------------------ facts
    async def check_answer(self, ans: Answer | None, mode: str, gold: object) -> AnswerCheck:
        """The answer check of ``ans`` against ``gold`` (the integer fast path, else math-verify in the pool)."""
        cfg = self.cfg
        if ans is None:
            return AnswerCheck(False, None, ("no_answer",))
        refused = precheck(ans, cfg, mode)
        if refused:
            return AnswerCheck(False, None, (refused,))
        if mode == "aime" and cfg.int_fast_path:
            v = as_int_literal(ans.text)
            if v is not None:
                if not in_aime_range(v):
                    return AnswerCheck(False, str(v), ("answer_out_of_range",))
                return AnswerCheck(v == gold, str(v))
        if not cfg.math_verify:
            return AnswerCheck(False, None, ("answer_not_integer",))
        assert self.pool is not None, "scorer not started"
        payload = {"pred": ans.text, "gold": gold, "mode": mode, "timeout_s": cfg.verify_timeout_s}
        try:
            res = await self.pool.submit(payload)
        except ItemTimeout:
            return AnswerCheck(False, None, ("answer_timeout",))
        except PoolError:
            return AnswerCheck(False, None, ("answer_check_failed",))
        flags = {"out_of_range": ("answer_out_of_range",), "not_integer": ("answer_not_integer",),
                 "unparsed": ("answer_unparsed",)}.get(res["reason"] or "", ())
        return AnswerCheck(bool(res["correct"]), res["value"], flags)

    async def step_verdicts(self, prompt: object, reading: Reading, judging: Judging,
                            cfg: MathConfig) -> tuple[list[StepVerdict] | None, str | None]:
        """(the step judge's verdicts, None) or (None, why the judge failed); (None, None) when nothing is judged."""
        texts = [s.text for s in reading.steps]
        if not judging.enabled or not texts:
            return None, None
        try:
            if judging.kind == "rule":
                verdicts = await rule_judge_steps(problem_text(prompt), texts, judging.strategy, cfg.max_steps_judged)
            else:
                verdicts = await judge_steps(self.judge, self.prompts, problem_text(prompt), texts, judging.strategy,
                                             judging.window, cfg.max_step_chars, cfg.max_steps_judged)
        except JudgeError as e:
            return None, str(e)
        return verdicts, None

    def judging(self, options: dict, cfg: MathConfig) -> Judging:
        """How this request judges the steps (``options``: ``judge``, ``strategy``, ``window``)."""
        strategy = options.get("strategy", cfg.strategy)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        enabled = bool(options.get("judge", True)) and (self.judge is not None or self.rule_judge)
        return Judging(enabled, "rule" if self.rule_judge else "llm", strategy, int(options.get("window", cfg.window)))

    def count(self, facts: MathFacts) -> None:
        """The responses judged, for /health: step_ok / step_unparseable / step_unavailable."""
        if facts.judge_error is not None:
            self.judge_stats["step_unavailable"] += 1
        elif facts.judged is not None:
            unparseable = any(v.verdict == "unparseable" for v in facts.judged)
            self.judge_stats["step_unparseable" if unparseable else "step_ok"] += 1

    # ------------------------------------------------------------------ score
    async def score(self, item: ScoreItem, options: dict) -> ItemResult:
        """Read the response, gather the answer check and the step judge concurrently, and give their verdict."""
        cfg = think_settings(options, self.cfg)
        judging = self.judging(options, cfg)
        mode, gold = resolve_mode(item, options, cfg.answer_type)
        if mode != "aime" and not cfg.math_verify:
            raise ValueError("without math-verify only integer (AIME-mode) ground truths can be scored")
        reading = read_response(item.response, cfg)
        check, (judged, judge_error) = await asyncio.gather(
            self.check_answer(reading.answer, mode, gold), self.step_verdicts(item.prompt, reading, judging, cfg))
        facts = MathFacts(reading, mode, check, judging, judged, judge_error)
        self.count(facts)
        return math_verdict(facts, cfg)
