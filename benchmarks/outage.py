"""Rollouts lost per second of a reward-server outage, measured in one run (issue 25).

verl 0.9.1's own reward-loop worker with the `bot` manager scores a steady stream of rollouts through the real math
server (`python -m reward_servers.math`), as a training step's rollouts arrive while they finish: a batch of four
every `--interval` seconds. After `--before` seconds the server is SIGKILLed; `--down` seconds later it
is started again on its port (its start-up is part of the outage); the stream goes on for `--after` seconds more.
A rollout is lost when its verdict is the failure sentinel (`scorer_failed`: no part in its group, advantage 0).

Printed for one URL and for two URLs of the same data source (round-robin, one of them killed), against the
offered rate measured in the same run: the outage (from the kill until /health answers again), the rollouts
scored meanwhile, the rollouts lost, lost per second of outage and its ratio to the offered rate (1.0: every
rollout offered while the server was away is lost).

    .venv/bin/python benchmarks/outage.py                         # defaults below
    .venv/bin/python benchmarks/outage.py --down 20 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import free_port  # noqa: E402
from tests.harness.manager import worker_for  # noqa: E402
from tests.harness.servers import kill, reward_server, scoring_batch  # noqa: E402


async def stream(worker, tokenizer, interval: float, seconds: float, events: dict) -> list[tuple]:
    """Submit a batch of four rollouts every `interval` s for `seconds` s, running each of `events` (name: (at,
    action)) once its time has come; (submitted at, finished at, failed) of each rollout."""
    start = time.monotonic()
    tasks = []

    async def one(at: float):
        outs = await worker.compute_score_batch(scoring_batch(tokenizer, "math"))
        done = time.monotonic() - start
        return [(at, done, out["reward_extra_info"]["scorer_failed"]) for out in outs]

    actions = []
    while (now := time.monotonic() - start) < seconds:
        for name, (at, action) in list(events.items()):
            if now >= at:  # in a thread of its own: the stream goes on while a server starts
                events.pop(name)
                actions.append(asyncio.create_task(asyncio.to_thread(action)))
        tasks.append(asyncio.create_task(one(now)))
        await asyncio.sleep(interval)
    await asyncio.gather(*actions)
    return [row for result in await asyncio.gather(*tasks) for row in result]


def measure(model_dir: Path, tokenizer, urls: int, args: argparse.Namespace) -> dict:
    ports = [free_port() for _ in range(urls)]
    servers = [reward_server("math", port) for port in ports]
    spec = ",".join(f"http://127.0.0.1:{port}" for port in ports)
    worker, _ = worker_for(model_dir, f"+reward.reward_kwargs.bot.scorers.math_remote='{spec}'",
                           f"+reward.reward_kwargs.bot.timeout_s={args.timeout_s}",
                           f"+reward.reward_kwargs.bot.retries={args.retries}")
    window = {}

    def down():
        kill(servers[0])
        window["down"] = time.monotonic()

    def up():
        servers[0] = reward_server("math", ports[0])  # returns once its /health answers
        window["up"] = time.monotonic()

    t0 = time.monotonic()
    events = {"down": (args.before, down), "up": (args.before + args.down, up)}
    try:
        rows = asyncio.run(stream(worker, tokenizer, args.interval, args.before + args.down + args.after, events))
    finally:
        for server in servers:
            kill(server)
    outage = window["up"] - window["down"]
    duration = max(done for _, done, _ in rows)
    lost = sum(failed for _, _, failed in rows)
    offered = len(rows) / duration
    during = sum(1 for at, _, _ in rows if window["down"] - t0 <= at <= window["up"] - t0)
    return {"urls": urls, "rollouts": len(rows), "offered_per_s": offered, "outage_s": outage,
            "offered_during_outage": during, "lost": int(lost), "lost_per_outage_s": lost / outage,
            "lost_over_offered": (lost / outage) / offered if offered else 0.0}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interval", type=float, default=0.25, help="seconds between batches of four rollouts")
    p.add_argument("--before", type=float, default=5.0, help="seconds before the kill")
    p.add_argument("--down", type=float, default=10.0, help="seconds from the kill to the restart")
    p.add_argument("--after", type=float, default=10.0, help="seconds after the restart")
    p.add_argument("--timeout-s", type=float, default=30.0, help="the manager's per-call deadline")
    p.add_argument("--retries", type=int, default=2, help="the manager's retries (each on the next URL)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    from transformers import AutoTokenizer

    from verl_bot_demo.tiny_model import build_model

    with tempfile.TemporaryDirectory() as tmp:
        build_model(Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(tmp)
        results = [measure(Path(tmp), tokenizer, urls, args) for urls in (1, 2)]
    print(f"{'URLs':>4} {'offered/s':>9} {'outage s':>8} {'offered in outage':>17} {'lost':>5} {'lost/s':>7} "
          f"{'lost/s / offered/s':>18}")
    for r in results:
        print(f"{r['urls']:>4} {r['offered_per_s']:>9.1f} {r['outage_s']:>8.1f} {r['offered_during_outage']:>17} "
              f"{r['lost']:>5} {r['lost_per_outage_s']:>7.2f} {r['lost_over_offered']:>18.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=2))


if __name__ == "__main__":
    main()
