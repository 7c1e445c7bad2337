"""The verdict block of a recipe's smoke run (`SMOKE=1 bash recipes/<task>_<model>.sh`, verl_bot/recipes/launch.py).

Read from what the run left in its output folder (verl's file-logger metrics, the token records of step 1, the
checkpoint) after the trainer exits; prints one block and exits 1 when a check failed:

    python -m verl_bot.launch.smoke --out-dir OUT --rc 0 --wall-s 300 --steps 2 --full-steps 150 --batch-scale 16/4 \\
        --rollouts-per-step 32 --engine vllm --platform gpu --judge "LLM code judge=http://..." --algo bot

Each check, its FAIL or WARN, and the projected time of the full run: docs/recipes.md, section `SMOKE=1`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

TOKEN_LEVEL_ALGOS = ("bot", "pure", "pass")  # ALGOs whose estimator reads a reward on every token
# How far the rollout's token probabilities may stray from the trainer's: (metric, bound) by platform. The CPU
# computes both in fp32 (a healthy run: ~1e-8 at most); a GPU in bf16 with different kernels (~1e-3 on average).
TOLERANCE = {"cpu": ("training/rollout_probs_diff_max", 1e-3), "gpu": ("training/rollout_probs_diff_mean", 0.01)}
MAX_FAILURE_SHARE = 0.5
LOCAL_SIGNAL_KEY = "reward/local_signal/mean"  # the share of rollouts with a local reward S (the bot manager)


def read_steps(metrics_path: Path) -> dict[int, dict[str, float]]:
    """{training step: its metrics} from verl's file logger (the last entry of a step wins)."""
    steps: dict[int, dict[str, float]] = {}
    if not metrics_path.exists():
        return steps
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        data = entry.get("data", {})
        if "training/global_step" in data or "actor/pg_loss" in data:
            steps.setdefault(int(entry["step"]), {}).update(data)
    return steps


def read_records(folder: Path) -> list[dict]:
    """The token records of the first recorded step (`verl_bot.observe.token_records`), [] when none."""
    files = sorted(folder.glob("step_*.jsonl"), key=lambda f: int(f.stem.split("_")[1])) if folder.is_dir() else []
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]


def dense_counts(records: Iterable[dict]) -> tuple[int, int, int]:
    """(responses, responses with a nonzero reward before their last token, responses whose advantage varies)."""
    n = dense = varying = 0
    for rec in records:
        rewards, advantages = rec["rewards"], rec["advantages"]
        n += 1
        dense += any(r != 0 for r in rewards[:-1])
        varying += len(set(advantages)) > 1
    return n, dense, varying


def all_finite(records: Iterable[dict], steps: dict[int, dict[str, float]]) -> bool:
    """True when every recorded advantage and every step's logged advantage extremes are finite."""
    values = [a for rec in records for a in rec["advantages"]]
    values += [m[k] for m in steps.values() for k in ("critic/advantages/max", "critic/advantages/min") if k in m]
    return all(math.isfinite(float(v)) for v in values)


def judge_stats(reward_urls: str) -> Counter | None:
    """The reward servers' judge counters (`judge_stats` of GET /health, summed over the comma-separated URLs) by
    outcome (`ok`, `unparseable`, `unavailable`; the judge's name prefix dropped), or None when none reports them."""
    total: Counter = Counter()
    found = False
    for url in filter(None, (u.strip() for u in reward_urls.split(","))):
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=10) as resp:
                stats = json.loads(resp.read()).get("judge_stats")
        except (OSError, ValueError):
            continue
        if isinstance(stats, dict):
            found = True
            for key, n in stats.items():
                if "attribution" not in key:  # the VLM's second turn is not a verdict of its own
                    total[key.rsplit("_", 1)[-1]] += int(n)
    return total if found else None


def judge_line(name: str, url: str, steps: dict[int, dict[str, float]], stats: Counter | None) -> tuple[str, str]:
    """(the judge's line, its tag ok/WARN/FAIL)."""
    if stats is not None:
        answered = stats["ok"] + stats["unparseable"]
        calls = answered + stats["unavailable"]
        tag = "FAIL" if calls and not answered else ("WARN" if stats["unavailable"] or not calls else "ok")
        return (f"{name} at {url}: {answered} of {calls} calls answered, {stats['ok']} with a usable score, "
                f"{stats['unavailable']} unavailable", tag)
    unavailable = mean_of(steps, "reward/flag/judge_unavailable/mean") or 0.0
    unparseable = mean_of(steps, "reward/flag/judge_unparseable/mean") or 0.0
    tag = "FAIL" if steps and unavailable >= 1.0 else ("WARN" if unavailable else "ok")
    return (f"{name} at {url}: unavailable on {unavailable:.0%} of the rollouts, without a usable score on "
            f"{unparseable:.0%}", tag)


def prm_line(spec: str, steps: dict[int, dict[str, float]], rollouts_per_step: int) -> tuple[str, str]:
    """(the PRM's line, its tag) from the manager's metrics: rollouts it scored (`prm_failed`: its call failed),
    steps scored per rollout (`prm_steps`), truncated inputs (`prm_truncated`). `spec`: "NAME=URL"."""
    name, _, url = spec.rpartition("=")
    scored = mean_of(steps, "reward/prm_steps/mean")
    if scored is None:
        return f"{name} at {url}: no PRM metrics logged (reward/prm_*/mean): the manager never called it", "FAIL"
    rollouts = len(steps) * rollouts_per_step
    lost = round(sum(float(m.get("reward/prm_failed/mean", 0.0)) for m in steps.values()) * rollouts_per_step)
    truncated = mean_of(steps, "reward/prm_truncated/mean") or 0.0
    tag = "FAIL" if rollouts and lost >= rollouts else ("WARN" if lost or truncated else "ok")
    return (f"{name} at {url}: {rollouts - lost} of {rollouts} rollouts scored, {scored:.1f} steps each on average, "
            f"input truncated on {truncated:.0%}", tag)


def mean_of(steps: dict[int, dict[str, float]], key: str) -> float | None:
    values = [float(m[key]) for m in steps.values() if key in m]
    return sum(values) / len(values) if values else None


def policy_line(steps: dict[int, dict[str, float]], platform: str) -> tuple[str, str]:
    """(the policy line, its tag): do the rollout and the trainer compute the same policy (`TOLERANCE`)? Beyond it
    at the first step, before any update, they do not (a policy mismatch); beyond it later only, the rollout serves
    older weights than the trainer's (stale weights)."""
    key, bound = TOLERANCE.get(platform, TOLERANCE["gpu"])
    diffs = {step: float(m[key]) for step, m in sorted(steps.items()) if key in m}
    if not diffs:
        return "no rollout log-probs (rollout.calculate_log_probs=false)", "ok"
    first, worst = min(diffs), max(diffs, key=diffs.get)
    metric = key.rsplit("/", 1)[1]
    if diffs[first] > bound:
        return (f"MISMATCH before any update: step {first}'s {metric} {diffs[first]:.2g} > {bound:g}, so the rollout "
                "samples another policy than the trainer computes from the same weights (a RoPE rule, a dtype, an "
                "attention kernel)", "FAIL" if platform == "cpu" else "WARN")
    if diffs[worst] > bound:
        return (f"stale weights: step {worst}'s {metric} {diffs[worst]:.2g} > {bound:g} after an update (step "
                f"{first}: {diffs[first]:.2g}): the rollout serves older weights than the trainer's", "WARN")
    return (f"rollout and trainer agree: {metric} at most {diffs[worst]:.2g} (<= {bound:g}) over {len(diffs)} "
            "steps", "ok")


def checkpoint_line(ckpt: Path) -> str:
    saved = sorted(ckpt.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])) if ckpt.is_dir() else []
    if not saved:
        return "none written"
    size = sum(f.stat().st_size for f in saved[-1].rglob("*") if f.is_file())
    return f"{saved[-1].name} written ({size / 2**20:.0f} MiB) in {ckpt}"


def fmt_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def verdict(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(the block's lines, the failed checks)."""
    out = Path(args.out_dir)
    steps = read_steps(out / "metrics.jsonl")
    records = read_records(out / "token_records")
    failed: list[str] = []
    lines = [f"rollout engine      {args.engine}", f"platform            {args.platform}"]
    if args.plan:
        lines.append(f"node plan           {args.plan}")

    done = len(steps)
    lines.append(f"steps done          {done} of {args.steps} (trainer exit {args.rc})")
    if args.rc != 0 or done < args.steps:
        failed.append("steps")

    fail_share = [float(m.get("reward/scorer_failed/mean", 0.0)) for m in steps.values()]
    worst = max(fail_share, default=0.0)
    lost = round(sum(fail_share) * args.rollouts_per_step)
    tag = "FAIL" if worst > MAX_FAILURE_SHARE else ("WARN" if lost else "ok")
    total = done * args.rollouts_per_step
    lines.append(f"scorer failures     {lost} of {total} rollouts (worst step {worst:.0%}) [{tag}]")
    if tag == "FAIL":
        failed.append("scorer")

    name, _, url = args.judge.partition("=")
    if url:
        text, tag = judge_line(name, url, steps, judge_stats(args.reward_url))
        lines.append(f"judge               {text} [{tag}]")
        if tag == "FAIL":
            failed.append("judge")
    else:
        lines.append(f"judge               none ({name or 'the task'} not configured)")
    if args.prm:
        text, tag = prm_line(args.prm, steps, args.rollouts_per_step)
        lines.append(f"PRM                 {text} [{tag}]")
        if tag == "FAIL":
            failed.append("prm")

    n, dense, varying = dense_counts(records)
    if args.algo in TOKEN_LEVEL_ALGOS:
        tag = "ok" if dense else "FAIL"
        lines.append(
            f"dense token rewards {dense} of {n} recorded responses carry rewards before their last token; "
            f"advantages vary within {varying} [{tag}]"
        )
        if not dense:
            failed.append("dense")
    else:
        lines.append(f"token rewards       one per response (ALGO={args.algo}); {n} responses recorded")
    local = mean_of(steps, LOCAL_SIGNAL_KEY)
    if args.algo in TOKEN_LEVEL_ALGOS and local is not None:
        tag = "WARN" if local == 0 else "ok"
        why = (": no token-level credit, BoT is GRPO here (no judge verdict, no step or line the scorer could "
               "attribute)" if local == 0 else "")
        lines.append(f"local signal        S on {local:.0%} of the rollouts{why} [{tag}]")
    finite = all_finite(records, steps)
    adv_max = max((abs(a) for rec in records for a in rec["advantages"]), default=0.0)
    lines.append(f"advantages          {'finite' if finite else 'NOT FINITE'} (|A| max {adv_max:.3g}) "
                 f"[{'ok' if finite else 'FAIL'}]")
    if not finite:
        failed.append("advantages")

    probed = mean_of(steps, "vps/probed_rows")
    if probed is not None:
        probe_failed = mean_of(steps, "vps/probe_failed_rows") or 0.0
        tag = "FAIL" if probed == 0 else ("WARN" if probe_failed else "ok")
        lines.append(f"belief probes       {probed:.0f} rows probed per step, {probe_failed:.0f} failed [{tag}]")
        if tag == "FAIL":
            failed.append("probes")
    answer_rate = mean_of(steps, "grail/answer_rate")
    if answer_rate is not None:
        lines.append(f"GRAIL weights       answer span found in {answer_rate:.0%} of the responses, "
                     f"mean weight {mean_of(steps, 'grail/w_mean'):.3g}")

    text, tag = policy_line(steps, args.platform)
    lines.append(f"policy              {text} [{tag}]")
    if tag == "FAIL":
        failed.append("policy")
    lines.append(f"checkpoint          {checkpoint_line(out / 'ckpt')}")

    times = [float(m["timing_s/step"]) for _, m in sorted(steps.items()) if "timing_s/step" in m]
    if times:
        later = times[1:] or times
        per_step = sum(later) / len(later)
        num, _, den = args.batch_scale.partition("/")
        scale = float(num) / float(den or 1)
        lines.append(f"time per step       {per_step:.1f} s (step 1: {times[0]:.1f} s, with warm-up); "
                     f"whole smoke run {fmt_duration(args.wall_s)}")
        lines.append(
            f"projected full run  {fmt_duration(per_step * scale * args.full_steps)} "
            f"({args.full_steps} steps x {per_step:.1f} s x batch {args.batch_scale}; "
            "without validation and checkpoints)"
        )
    return lines, failed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--rc", type=int, default=0, help="the trainer's exit status")
    parser.add_argument("--wall-s", type=float, default=0.0, help="wall time of the trainer")
    parser.add_argument("--steps", type=int, default=2, help="steps the smoke run asked for")
    parser.add_argument("--full-steps", type=int, required=True, help="steps of the full run")
    parser.add_argument("--batch-scale", default="1/1", help="full batch / smoke batch, e.g. 16/4")
    parser.add_argument("--rollouts-per-step", type=int, required=True)
    parser.add_argument("--engine", required=True, help="the rollout engine and its version")
    parser.add_argument("--platform", default="gpu")
    parser.add_argument("--plan", default="", help="the node plan of the run (verl_bot/launch/node_plan.py)")
    parser.add_argument("--judge", default="", help="NAME=URL of the judge ('NAME=' when none)")
    parser.add_argument("--prm", default="", help="NAME=URL of the PRM that gives S ('' when none)")
    parser.add_argument("--reward-url", default="", help="the reward server(s), comma-separated: their judge counters")
    parser.add_argument("--algo", required=True)
    parser.add_argument("--title", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lines, failed = verdict(args)
    head = f"== verl-bot smoke verdict{': ' + args.title if args.title else ''} =="
    tail = "VERDICT: OK" if not failed else f"VERDICT: FAILED ({', '.join(failed)})"
    print("\n".join([head, *(f"  {line}" for line in lines), tail]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
