"""``python -m reward_servers.math --host 127.0.0.1 --port 8802 [--judge-base-url http://host:8000/v1 ...]``.

The CPU task ``toy_math`` (integer arithmetic chains): ``--judge rule --no-math-verify`` (no endpoint, no workers).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from reward_servers.common.judge import JudgeConfig
from reward_servers.common.service import add_common_args, serve
from reward_servers.math.config import ANSWER_TYPES, JUDGE_KINDS, UNTAGGED_STEPS, MathConfig
from reward_servers.math.server import MathScorer
from reward_servers.math.step_judge import STRATEGIES

JUDGE_ENV_PREFIX = "MATH_JUDGE_"


def build_parser() -> argparse.ArgumentParser:
    d = MathConfig()
    p = add_common_args(argparse.ArgumentParser(prog="python -m reward_servers.math", description=__doc__), 8802)
    g = p.add_argument_group("answer")
    g.add_argument("--answer-type", choices=ANSWER_TYPES, default=d.answer_type)
    g.add_argument("--workers", type=int, default=d.workers, help="verifier processes (0: CPU count)")
    g.add_argument("--verify-timeout-s", type=int, default=d.verify_timeout_s, help="math-verify's own timeout")
    g.add_argument("--answer-timeout-s", type=float, default=d.item_timeout_s, help="hard limit; kill + replace")
    g.add_argument("--worker-memory-mb", type=int, default=d.worker_memory_mb)
    g.add_argument("--max-answer-chars", type=int, default=d.max_answer_chars)
    g.add_argument("--max-answer-depth", type=int, default=d.max_answer_depth)
    g.add_argument("--no-int-fast-path", action="store_true", help="send plain integers through math-verify too")
    g.add_argument(
        "--no-math-verify",
        action="store_true",
        help="no worker pool: only plain integer answers (AIME mode) can be correct; for integer tasks (toy_math)",
    )
    r = p.add_argument_group("reward (Eq. 8)")
    r.add_argument("--answer-weight", type=float, default=d.answer_weight)
    r.add_argument("--local-weight", type=float, default=d.local_weight)
    r.add_argument("--format-bonus", type=float, default=d.format_bonus)
    r.add_argument("--format-penalty", type=float, default=d.format_penalty)
    r.add_argument("--format-missing", type=float, default=d.format_missing)
    r.add_argument("--format-native", type=float, default=d.format_native, help="think block, then \\boxed{}, no tag")
    t = p.add_argument_group("think block (a reasoning model's <think> ... </think>)")
    t.add_argument(
        "--think-opened",
        action="store_true",
        help="the chat template ends the prompt with <think>: a response without </think> was cut off inside it",
    )
    t.add_argument("--think-local", type=float, default=d.think_local, help="local signal on the think block")
    t.add_argument(
        "--think-truncated-penalty",
        type=float,
        default=d.think_truncated_penalty,
        help="part think_truncated of a response cut off inside its think block",
    )
    t.add_argument(
        "--untagged-steps",
        choices=UNTAGGED_STEPS,
        default=d.untagged_steps,
        help="steps of an answer after </think> without step tags: its paragraphs, or none",
    )
    j = p.add_argument_group("step judge (env MATH_JUDGE_BASE_URL, _MODEL, _API_KEY, _TIMEOUT_S, ...)")
    j.add_argument(
        "--judge",
        choices=JUDGE_KINDS,
        default="llm",
        help="llm: the endpoint below (on when a base URL is set); rule: integer arithmetic chains, no endpoint",
    )
    j.add_argument("--judge-base-url", default=None, help="OpenAI-compatible base URL incl. /v1; unset: no judge")
    j.add_argument("--judge-model", default=None, help="default: first model listed by the endpoint")
    j.add_argument("--judge-timeout-s", type=float, default=None)
    j.add_argument("--judge-max-retries", type=int, default=None)
    j.add_argument("--judge-concurrency", type=int, default=None)
    j.add_argument("--strategy", choices=STRATEGIES, default=d.strategy)
    j.add_argument("--window", type=int, default=d.window, help="earlier steps shown to the judge (<0: all)")
    j.add_argument("--max-step-chars", type=int, default=d.max_step_chars)
    j.add_argument("--max-steps-judged", type=int, default=d.max_steps_judged)
    j.add_argument("--prompt-dir", default=None)
    return p


def config_from_args(args: argparse.Namespace) -> MathConfig:
    judge = JudgeConfig.from_env(
        JUDGE_ENV_PREFIX,
        base_url=args.judge_base_url,
        model=args.judge_model,
        timeout_s=args.judge_timeout_s,
        max_retries=args.judge_max_retries,
        max_concurrency=args.judge_concurrency,
    )
    has_url = args.judge_base_url is not None or bool(os.environ.get(JUDGE_ENV_PREFIX + "BASE_URL"))
    if args.judge == "rule" and args.judge_base_url is not None:
        raise SystemExit("error: --judge rule takes no --judge-base-url (the rule judge needs no endpoint)")
    if args.no_math_verify and args.no_int_fast_path:
        raise SystemExit("error: --no-math-verify needs the integer fast path (drop --no-int-fast-path)")
    enabled = args.judge == "rule" or has_url
    return MathConfig(
        answer_weight=args.answer_weight,
        local_weight=args.local_weight,
        format_bonus=args.format_bonus,
        format_penalty=args.format_penalty,
        format_missing=args.format_missing,
        format_native=args.format_native,
        think_opened=args.think_opened,
        think_local=args.think_local,
        think_truncated_penalty=args.think_truncated_penalty,
        untagged_steps=args.untagged_steps,
        answer_type=args.answer_type,
        int_fast_path=not args.no_int_fast_path,
        math_verify=not args.no_math_verify,
        max_answer_chars=args.max_answer_chars,
        max_answer_depth=args.max_answer_depth,
        verify_timeout_s=args.verify_timeout_s,
        item_timeout_s=args.answer_timeout_s,
        workers=args.workers,
        worker_memory_mb=args.worker_memory_mb,
        judge_enabled=enabled,
        judge_kind=args.judge,
        judge=judge,
        strategy=args.strategy,
        window=args.window,
        max_step_chars=args.max_step_chars,
        max_steps_judged=args.max_steps_judged,
        prompt_dir=args.prompt_dir,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    serve(MathScorer(config_from_args(args)), args)


if __name__ == "__main__":
    main()
