"""Knobs of the math scorer: `MathConfig` (the CLI's defaults, `python -m reward_servers.math --help`) and the think
knobs a request may set per call (`think_settings`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from reward_servers.common.judge import JudgeConfig

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
