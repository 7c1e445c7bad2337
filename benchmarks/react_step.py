"""The React reward server under one training step's load: the recipe's whole step in flight at once.

recipes/react_qwen.sh scores TRAIN_BATCH_SIZE x ROLLOUT_N rollouts per step (16 x 8 = 128). The React server
runs in this process (``ServerThread``, defaults of ``ReactConfig``; judges off, as no LLM or VLM judge runs
here, so each item is extracted, bundled, linted and rendered, without a screenshot, as with the recipe's
default of no VLM judge). Every item goes in its own ``POST /score`` (``{"items": [item]}``, the item as
verl-bot's reward manager sends it, plus an ``id``), all at once, with no retry. A share of the items
(``--hostile-share``, rounded up, spread evenly over the step) is hostile, cycling through an infinite loop
(tests/fixtures/react/infinite_loop.md), a memory hog (arrays allocated in a loop until the page dies) and a
200,000-node DOM; the others are the fixture responses of benchmarks/react_reward.py, each made unique.

Checked: every id gets exactly one verdict (lost: no verdict, an HTTP error or a client exception; duplicated:
an id answered twice, or an id that was never sent), no hostile item gets the server's error result (a crash),
no normal item gets an error or an infrastructure flag (time-out, retry, worker restart), the server scored
each item once (its ``/health`` counters) and answers ``/health`` afterwards. The exit status is 1 when a check
fails.

Printed: the step's wall time and items/s, the CPU seconds per item (this process, the Node workers and
Chromium, via psutil; the client's own CPU is included), items/s per core (1 / CPU s per item) and the cores
a GPU node needs for the server to keep up with the recipe: items per step x CPU s per item / generation s per
step, for a few generation times (no GPU here to measure one; ``--gen-s-per-step`` adds one).

    .venv/bin/python benchmarks/react_step.py                    # one step of react_qwen.sh, defaults below
    .venv/bin/python benchmarks/react_step.py --items 6 --hostile-share 0.5 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from react_reward import FIX, cpu_seconds, fixture_responses, unique  # noqa: E402

from reward_servers.common.service import ServerThread, create_app  # noqa: E402
from reward_servers.react.config import ReactConfig  # noqa: E402
from reward_servers.react.server import ReactScorer  # noqa: E402

RECIPE = "react_qwen"  # the recipe whose step is sent (verl_bot/recipes/tables.py)
PROMPT = "Build a small single-page React app for the request."
GEN_S_PER_STEP = (30.0, 60.0, 120.0)

MEMORY_HOG = """```jsx
export default function Hoard() {
  const hoard = [];
  for (let i = 0; i < 1e9; i++) hoard.push(new Array(1 << 16).fill(i));
  return <div>{hoard.length}</div>;
}
```
"""
DOM_200K = """```jsx
export default function Mosaic() {
  const cells = Array.from({ length: 200000 }, (_, i) => i);
  return (
    <div className="flex flex-wrap">
      {cells.map((i) => (
        <span key={i} className="m-px h-1 w-1 bg-sky-400" />
      ))}
    </div>
  );
}
```
"""
HOSTILE = {"infinite_loop": (FIX / "infinite_loop.md").read_text(), "memory_hog": MEMORY_HOG, "dom_200k": DOM_200K}
# a normal item with one of these did not keep scoring: the hostile items' load reached it
INFRA_FLAGS = {"render_timeout", "compile_timeout", "render_retried", "render_infra_error", "render_worker_restarted",
               "compile_worker_restarted", "lint_failed", "timeout"}


def recipe_run():
    """The recipe's run on a GPU node with nothing set (its defaults: batch, rollouts, the reward calls' timeout)."""
    from verl_bot.recipes.env import Env
    from verl_bot.recipes.settings import run_of
    from verl_bot.recipes.tables import RECIPES

    return run_of(RECIPES[RECIPE], Env({}), "gpu")


def hostile_count(items: int, share: float) -> int:
    """Hostile items in a step: ``share`` of ``items``, rounded up (a float product's last bit does not count)."""
    return min(items, math.ceil(round(share * items, 9)))


def hostile_positions(items: int, hostile: int) -> set[int]:
    """``hostile`` distinct indices spread evenly over ``range(items)`` (the middle of each equal share)."""
    return {(2 * j + 1) * items // (2 * hostile) for j in range(hostile)}


def step_items(items: int, share: float) -> list[tuple[str, str]]:
    """(kind, response) of each item of one step: the hostile kinds in turn at the hostile positions, else
    ``normal``; every response distinct."""
    k = hostile_count(items, share)
    hostile = zip(itertools.cycle(HOSTILE), unique(list(HOSTILE.values()), k), strict=False)
    normal = iter(unique(fixture_responses(), items - k))
    at = hostile_positions(items, k)
    return [next(hostile) if i in at else ("normal", next(normal)) for i in range(items)]


def request_item(item_id: int, response: str) -> dict:
    """One REWARD_API item as the ``bot`` reward manager builds it (verl_bot/rewards/manager.py), with an id."""
    return {"id": item_id, "prompt": PROMPT, "response": response, "ground_truth": None, "extra_info": {}}


async def post_one(session: aiohttp.ClientSession, url: str, item: dict) -> dict:
    """POST one item to /score: its verdicts (the answer's items), the transport error if any, and the seconds."""
    t = time.perf_counter()
    verdicts, error = [], None
    try:
        async with session.post(url + "/score", json={"items": [item]}) as resp:
            if resp.status != 200:
                error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
            else:
                body = await resp.json()
                verdicts = body.get("items", []) if isinstance(body, dict) else []
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        error = f"{type(e).__name__}: {e}"
    return {"verdicts": verdicts, "error": error, "s": time.perf_counter() - t}


async def health(session: aiohttp.ClientSession, url: str) -> dict:
    """The server's /health body, with its HTTP status under ``http``."""
    async with session.get(url + "/health") as resp:
        return {"http": resp.status, **await resp.json()}


async def send_step(url: str, kinds_responses: list[tuple[str, str]], warmup: int, timeout_s: float) -> dict:
    """Warm up with ``warmup`` compiling items, then send the step, every item at once; the raw measurements."""
    connector = aiohttp.TCPConnector(limit=0)  # no client-side cap: the whole step is in flight
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector) as s:
        warm = unique(fixture_responses(only_compiling=True), warmup)
        await asyncio.gather(*(post_one(s, url, request_item(-1 - i, r)) for i, r in enumerate(warm)))
        before = await health(s, url)
        c0, t0 = cpu_seconds(), time.perf_counter()
        outcomes = await asyncio.gather(*(post_one(s, url, request_item(i, r))
                                          for i, (_, r) in enumerate(kinds_responses)))
        wall, c1 = time.perf_counter() - t0, cpu_seconds()
        after = await health(s, url)
    return {"outcomes": outcomes, "wall_s": wall, "cpu_s": None if c0 is None else c1 - c0,
            "health_before": before, "health_after": after}


def tally(kinds: list[str], outcomes: list[dict]) -> dict:
    """Lost and duplicated verdicts, transport errors, and per kind: items, flags, server errors, compiled, hurt
    (a normal item with an error or an infrastructure flag), latency."""
    got = Counter(v.get("id") for o in outcomes for v in o["verdicts"])
    sent = set(range(len(kinds)))
    verdict = {v.get("id"): v for o in outcomes for v in o["verdicts"]}
    per_kind: dict[str, dict] = {}
    for i, kind in enumerate(kinds):
        k = per_kind.setdefault(kind, {"items": 0, "answered": 0, "server_errors": 0, "compiled": 0, "hurt": 0,
                                       "flags": Counter(), "max_s": 0.0})
        k["items"] += 1
        k["max_s"] = max(k["max_s"], outcomes[i]["s"])
        v = verdict.get(i)
        if v is None:
            continue
        k["answered"] += 1
        k["server_errors"] += v.get("error") is not None
        k["compiled"] += bool(v.get("info", {}).get("compiled"))
        k["flags"].update(v.get("flags", []))
        k["hurt"] += kind == "normal" and (v.get("error") is not None or bool(INFRA_FLAGS & set(v.get("flags", []))))
    for k in per_kind.values():
        k["flags"] = dict(k["flags"].most_common())
    latencies = sorted(o["s"] for o in outcomes)
    return {
        "lost": sum(1 for i in sent if got[i] == 0),
        "duplicated": sum(c - 1 for i, c in got.items() if i in sent) + sum(c for i, c in got.items() if i not in sent),
        "transport_errors": [o["error"] for o in outcomes if o["error"]][:10],
        "per_kind": per_kind,
        "latency_s": {"p50": statistics.median(latencies), "max": latencies[-1]},
    }


def server_delta(before: dict, after: dict) -> dict:
    """What the step did to the server: items scored, render time-outs and worker restarts (from /health)."""
    def diff(section: str, key: str) -> int:
        return after.get(section, {}).get(key, 0) - before.get(section, {}).get(key, 0)

    return {"http_after": after["http"], "browser_after": after.get("browser"),
            "scored": diff("counters", "items"), "render_timeouts": diff("counters", "render_timeouts"),
            "compile_restarts": diff("restarts", "compile"), "render_restarts": diff("restarts", "render")}


def cores_needed(items: int, cpu_s_per_item: float, gen_s_per_step: float) -> float:
    """Cores that score a step's items in the time the GPUs take to generate the next step."""
    return items * cpu_s_per_item / gen_s_per_step


def failures(res: dict) -> list[str]:
    """What went wrong in the step (empty: every check passed)."""
    out = []
    if res["lost"] or res["duplicated"]:
        out.append(f"{res['lost']} lost and {res['duplicated']} duplicated verdicts")
    for kind, k in res["per_kind"].items():
        if kind != "normal" and k["server_errors"]:
            out.append(f"{k['server_errors']} {kind} items got the server's error result")
    if res["per_kind"].get("normal", {}).get("hurt"):
        out.append(f"{res['per_kind']['normal']['hurt']} normal items hurt (error or infrastructure flag)")
    if res["server"]["scored"] != res["items"]:
        out.append(f"the server scored {res['server']['scored']} items for {res['items']} sent")
    if res["server"]["http_after"] != 200:
        out.append(f"/health answered {res['server']['http_after']} after the step")
    return out


def report(res: dict) -> list[str]:
    """The printed lines."""
    cfg, srv = res["config"], res["server"]
    hostile = {kind: k["items"] for kind, k in res["per_kind"].items() if kind != "normal"}
    lines = [
        f"step         : {res['items']} rollouts ({res['recipe']}), all in flight, one POST /score each, no retry",
        f"server       : in-process, {cfg['compile_workers']} compile workers, {cfg['render_slots']} render slots, "
        f"render limit {cfg['render_timeout_s']} s; judges OFF (no LLM/VLM judge here: extract+bundle+lint+render, "
        "no screenshot)",
        f"hostile      : {sum(hostile.values())} ({cfg['hostile_share']:.0%} rounded up): "
        + ", ".join(f"{kind} {n}" for kind, n in hostile.items()),
        f"verdicts     : {res['answered']}/{res['items']} ids answered, {res['lost']} lost, "
        f"{res['duplicated']} duplicated, transport errors {len(res['transport_errors'])}",
    ]
    for kind, k in res["per_kind"].items():
        flags = ", ".join(f"{f} {n}" for f, n in k["flags"].items()) or "none"
        lines.append(f"{kind:13s}: {k['answered']}/{k['items']} answered, server errors {k['server_errors']}, "
                     f"compiled {k['compiled']}, hurt {k['hurt']}, slowest {k['max_s']:.1f} s; flags: {flags}")
    lines += [
        f"after        : /health {srv['http_after']} (browser {srv['browser_after']}), scored {srv['scored']}, "
        f"render time-outs {srv['render_timeouts']}, restarts compile {srv['compile_restarts']} "
        f"render {srv['render_restarts']}",
        f"step wall    : {res['wall_s']:.1f} s = {res['items_per_s']:.2f} items/s on {res['machine']} "
        f"(latency p50 {res['latency_s']['p50']:.1f} s, max {res['latency_s']['max']:.1f} s)",
        f"CPU          : {res['cpu_s']:.1f} s for the step = {res['cpu_s_per_item']:.3f} s per item -> "
        f"{res['items_per_s_per_core']:.2f} items/s per core",
    ]
    for gen_s, cores in res["cores_needed"].items():
        lines.append(f"keep up      : generation {float(gen_s):5.0f} s/step -> {cores:5.2f} cores "
                     f"({math.ceil(cores)} whole) for the React server, judges off")
    lines.append(f"load average : start {res['load_avg_start']}, end {res['load_avg_end']}")
    lines.append("RESULT       : " + ("; ".join(res["failures"]) or "ok (0 lost, 0 duplicated, no hostile crash)"))
    return lines


def main(argv: list[str] | None = None) -> dict:
    run = recipe_run()
    batch, rollouts = run.train_batch_size, run.rollout_n
    base = ReactConfig()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=batch * rollouts,
                    help=f"rollouts in the step (default {RECIPE}.sh's TRAIN_BATCH_SIZE x ROLLOUT_N)")
    ap.add_argument("--hostile-share", type=float, default=0.05, help="share of hostile items, rounded up")
    ap.add_argument("--compile-workers", type=int, default=base.compile_workers)
    ap.add_argument("--render-slots", type=int, default=base.render_slots)
    ap.add_argument("--render-timeout-s", type=float, default=base.render_timeout_s)
    ap.add_argument("--warmup", type=int, default=8, help="compiling items sent before the step (not measured)")
    ap.add_argument("--timeout-s", type=float, default=float(run.reward_timeout_s),
                    help="per request, as the recipe's REWARD_TIMEOUT_S (the reward manager's timeout_s)")
    ap.add_argument("--gen-s-per-step", type=float, default=60.0,
                    help=f"generation seconds per step for the cores estimate (printed too: {GEN_S_PER_STEP})")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    items = step_items(args.items, args.hostile_share)
    cfg = ReactConfig(compile_workers=args.compile_workers, render_slots=args.render_slots,
                      render_timeout_s=args.render_timeout_s)
    load_start = os.getloadavg()
    with ServerThread(create_app(ReactScorer(cfg, judges_from_env=False)), startup_timeout_s=180) as srv:
        raw = asyncio.run(send_step(srv.url, items, args.warmup, args.timeout_s))
    if raw["cpu_s"] is None:
        raise SystemExit("psutil is needed for the CPU figures")
    res = {
        "recipe": f"{RECIPE}.sh: {batch} prompts x {rollouts} rollouts = {batch * rollouts}",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "config": {"compile_workers": cfg.compile_workers, "render_slots": cfg.render_slots,
                   "render_timeout_s": cfg.render_timeout_s, "hostile_share": args.hostile_share,
                   "judges": "off", "warmup": args.warmup, "timeout_s": args.timeout_s},
        "items": args.items,
        **tally([kind for kind, _ in items], raw["outcomes"]),
        "server": server_delta(raw["health_before"], raw["health_after"]),
        "wall_s": raw["wall_s"],
        "items_per_s": args.items / raw["wall_s"],
        "cpu_s": raw["cpu_s"],
        "cpu_s_per_item": raw["cpu_s"] / args.items,
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg(),
    }
    res["answered"] = sum(k["answered"] for k in res["per_kind"].values())
    res["items_per_s_per_core"] = 1 / res["cpu_s_per_item"]
    res["cores_needed"] = {str(g): cores_needed(args.items, res["cpu_s_per_item"], g)
                           for g in sorted({*GEN_S_PER_STEP, args.gen_s_per_step})}
    res["failures"] = failures(res)
    print("\n".join(report(res)))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    sys.exit(1 if main()["failures"] else 0)
