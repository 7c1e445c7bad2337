"""Throughput of the React reward server (issue 4), measured in one run:

1. compile+lint items/s through the HTTP server (render and judges off), persistent Node workers;
2. the naive baseline: a new Node process per item doing the same bundling and linting
   (``node worker.mjs --once``), on a sample of the same items;
3. renders/s: full items (bundle + lint + render + screenshot) through the server, judges off.

Items are the fixture responses of tests/fixtures/react (all but the infinite loop), each made unique.

    python benchmarks/react_reward.py                 # defaults below
    python benchmarks/react_reward.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reward_servers.common.service import ServerThread, create_app  # noqa: E402
from reward_servers.react.config import ReactConfig  # noqa: E402
from reward_servers.react.extract import extract  # noqa: E402
from reward_servers.react.server import ReactScorer  # noqa: E402
from reward_servers.react.worker import HERE, WORKER_JS  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "react"
SKIP = {"infinite_loop"}


def fixture_responses(only_compiling: bool = False) -> list[str]:
    cases = json.loads((FIX / "cases.json").read_text())
    out = []
    for p in sorted(FIX.glob("*.md")):
        if p.stem in SKIP or cases.get(p.stem, {}).get("not_component"):
            continue
        if only_compiling and not cases.get(p.stem, {}).get("compiled"):
            continue
        out.append(p.read_text())
    return out


def unique(responses: list[str], n: int) -> list[str]:
    """n responses cycling through the fixtures, each with a distinct trailing code comment."""
    items = []
    for i in range(n):
        r = responses[i % len(responses)]
        ex = extract(r)
        items.append(r[: ex.end] + f"\n// variant {i}" + r[ex.end :])
    return items


def cpu_seconds() -> float | None:
    """user+sys CPU seconds of this process and all its descendants (Node workers, Chromium), if psutil is there.

    Descendants that already exited count too, through their parent's children times (Chromium's zygote reaps
    renderer processes), so a short-lived process is not missed."""
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def post_all(url: str, responses: list[str], batch: int, options: dict) -> tuple[float, list[dict]]:
    out: list[dict] = []
    t = time.perf_counter()
    with httpx.Client(timeout=600) as c:
        for i in range(0, len(responses), batch):
            items = [{"id": i + j, "prompt": "Build the UI.", "response": r}
                     for j, r in enumerate(responses[i : i + batch])]
            r = c.post(url + "/score", json={"items": items, "options": options})
            r.raise_for_status()
            out += r.json()["items"]
    return time.perf_counter() - t, out


def naive(responses: list[str]) -> float:
    t = time.perf_counter()
    for r in responses:
        code = extract(r).code
        p = subprocess.run(["node", str(WORKER_JS), "--once"], input=json.dumps({"id": 1, "op": "naive_compile",
                           "code": code}), capture_output=True, text=True, cwd=HERE, check=True, timeout=300)
        assert json.loads(p.stdout)["ok"]
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=400, help="compile+lint items through the server")
    ap.add_argument("--batch", type=int, default=64, help="items per /score request")
    ap.add_argument("--naive-items", type=int, default=12, help="items for the process-per-item baseline")
    ap.add_argument("--renders", type=int, default=40, help="full (rendered) items")
    ap.add_argument("--compile-workers", type=int, default=2)
    ap.add_argument("--render-slots", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    all_resp = fixture_responses()
    good = fixture_responses(only_compiling=True)
    cfg = ReactConfig(compile_workers=args.compile_workers, render_slots=args.render_slots, render_timeout_s=20)
    scorer = ReactScorer(cfg, judges_from_env=False)
    res: dict = {"machine": f"{platform.machine()} {os.cpu_count()} cpus", "load_avg_start": os.getloadavg()}
    with ServerThread(create_app(scorer), startup_timeout_s=180) as srv:
        off = {"render": False, "llm_judge": False, "vlm_judge": False}
        post_all(srv.url, unique(all_resp, 32), args.batch, off)  # warm-up
        c0 = cpu_seconds()
        dt, out = post_all(srv.url, unique(all_resp, args.items), args.batch, off)
        c1 = cpu_seconds()
        assert all(o["error"] is None for o in out)
        if c0 is not None:
            res["compile_lint_cpu_ms_per_item"] = 1000 * (c1 - c0) / args.items
        res["compile_lint_items"] = args.items
        res["compile_lint_items_per_s"] = args.items / dt

        # with a screenshot per item, as the VLM judge needs (returned to the client here)
        on = {"render": True, "llm_judge": False, "vlm_judge": False, "return_screenshot": True}
        post_all(srv.url, unique(good, 4), args.batch, on)  # warm-up
        c0 = cpu_seconds()
        dt, out = post_all(srv.url, unique(good, args.renders), args.batch, on)
        c1 = cpu_seconds()
        if c0 is not None:
            res["render_cpu_ms_per_item"] = 1000 * (c1 - c0) / args.renders
        rendered = sum(1 for o in out if o["info"].get("rendered"))
        res["renders"] = args.renders
        res["rendered_ok"] = rendered
        res["renders_per_s"] = args.renders / dt
        res["render_ms_median"] = sorted(o["info"]["render"]["ms"] for o in out)[len(out) // 2]

    c0 = os.times()
    dt = naive(unique(all_resp, args.naive_items))
    c1 = os.times()
    res["naive_cpu_ms_per_item"] = 1000 * ((c1.children_user - c0.children_user)
                                           + (c1.children_system - c0.children_system)) / args.naive_items
    res["naive_items"] = args.naive_items
    res["naive_items_per_s"] = args.naive_items / dt
    res["speedup_vs_naive"] = res["compile_lint_items_per_s"] / res["naive_items_per_s"]
    res["load_avg_end"] = os.getloadavg()
    res["config"] = {"compile_workers": args.compile_workers, "render_slots": args.render_slots}

    print(f"compile+lint : {res['compile_lint_items_per_s']:.1f} items/s ({args.items} items, server)")
    print(f"naive        : {res['naive_items_per_s']:.2f} items/s ({args.naive_items} items, process per item)")
    print(f"speed-up     : {res['speedup_vs_naive']:.1f}x")
    print(f"render       : {res['renders_per_s']:.2f} renders/s ({rendered}/{args.renders} rendered, "
          f"median {res['render_ms_median']} ms)")
    for k in ("compile_lint_cpu_ms_per_item", "naive_cpu_ms_per_item", "render_cpu_ms_per_item"):
        if k in res:
            print(f"{k:28s}: {res[k]:.1f} ms CPU")
    print(f"load average : start {res['load_avg_start']}, end {res['load_avg_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
