"""Answer verifications per second: the math reward server over HTTP vs math-verify called in one process.

Everything is measured in the same run on the same machine, and reported as ratios to the in-process baselines:

- ``mv_full``: ``math_verify.parse(response)`` + ``verify(gold, pred)`` per response, one process, main thread
  (what a reward function calling math-verify directly does);
- ``mv_answer``: the same on the extracted answer only (``$33$``), one process;
- ``worker_fn``: the server worker's own function (``reward_servers.math.verify:check``: one math-verify parse of
  the answer, integer normalisation, no gold parse) on the extracted answers, one process: identical work to the
  ``server_math_verify`` run, so that ratio is the pool's parallelism net of HTTP/IPC overhead;
- ``server``: ``POST /score`` batches to ``python -m reward_servers.math``'s app (worker pool, judge off),
  ``--clients`` concurrent HTTP clients; once with the plain-integer fast path (default) and once without
  (``int_fast_path=False``: every answer goes through math-verify in the workers).

    .venv/bin/python benchmarks/math_reward.py [--n 4000] [--baseline-n 1000] [--batch 256] [--workers 0]

AIME-style integer answers, half right, half wrong. Prints a table and one JSON line. Besides wall-clock rates it
reports CPU milliseconds per verification (this process, i.e. server + HTTP clients, plus the worker processes):
on a shared machine the wall rates move with the load average, the CPU cost per item much less.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests  # noqa: E402

from reward_servers.common.service import ServerThread, create_app  # noqa: E402
from reward_servers.math.server import MathConfig, MathScorer  # noqa: E402


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_items(n: int, seed: int = 0) -> list[dict]:
    """``n`` tagged responses with integer answers (0-999); every other one is wrong."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        gt = rng.randrange(1000)
        ans = gt if i % 2 == 0 else (gt + 1) % 1000
        resp = (
            f"<step 1>Let a = {rng.randrange(100)} and b = {rng.randrange(100)}.</step 1>\n"
            f"<step 2>Combining the cases gives {ans} configurations.</step 2>\n"
            f"<final>{ans:03d}</final>"
        )
        items.append({"id": i, "prompt": "p", "response": resp, "ground_truth": str(gt)})
    return items


def bench_in_process(items: list[dict], answer_only: bool) -> tuple[float, int, float]:
    """(verifications/s, number correct, CPU ms per item) calling math-verify in this process's main thread."""
    from math_verify import parse, verify

    from reward_servers.math.parsing import extract_answer, parse_response

    t0, c0 = time.perf_counter(), time.process_time()
    correct = 0
    for it in items:
        text = it["response"]
        if answer_only:
            ans = extract_answer(text, parse_response(text))
            text = f"${ans.text}$"
        correct += bool(verify(parse(f"${it['ground_truth']}$"), parse(text)))
    cpu_ms = 1000 * (time.process_time() - c0) / len(items)
    return len(items) / (time.perf_counter() - t0), correct, cpu_ms


def bench_worker_fn(items: list[dict]) -> tuple[float, int, float]:
    """(verifications/s, number correct, CPU ms per item) of the worker function itself, in this process."""
    from reward_servers.math.parsing import extract_answer, parse_response
    from reward_servers.math.verify import check

    payloads = []
    for it in items:
        ans = extract_answer(it["response"], parse_response(it["response"]))
        payloads.append({"pred": ans.text, "gold": int(it["ground_truth"]), "mode": "aime", "timeout_s": 3})
    t0, c0 = time.perf_counter(), time.process_time()
    correct = sum(bool(check(p)["correct"]) for p in payloads)
    cpu_ms = 1000 * (time.process_time() - c0) / len(items)
    return len(items) / (time.perf_counter() - t0), correct, cpu_ms


def bench_server(items: list[dict], cfg: MathConfig, batch: int, clients: int) -> tuple[float, int, float]:
    """(verifications/s, number correct, CPU ms per item) through HTTP, after one warm-up request.

    CPU counts this whole process (server AND the benchmark's HTTP clients) plus the worker processes.
    """
    scorer = MathScorer(cfg)
    with ServerThread(create_app(scorer, max_items=max(batch, 4096))) as srv:
        url = srv.url + "/score"
        session = requests.Session()

        def post(chunk: list[dict]) -> list[dict]:
            r = session.post(url, json={"items": chunk, "options": {"judge": False}}, timeout=600)
            r.raise_for_status()
            return r.json()["items"]

        post(items[: min(len(items), 64)])  # warm-up
        chunks = [items[i : i + batch] for i in range(0, len(items), batch)]
        pids = scorer.pool.pids()
        t0, c0, w0 = time.perf_counter(), time.process_time(), sum(proc_cpu_s(p) for p in pids)
        with ThreadPoolExecutor(clients) as ex:
            outs = [o for res in ex.map(post, chunks) for o in res]
        rate = len(items) / (time.perf_counter() - t0)
        cpu_s = time.process_time() - c0 + sum(proc_cpu_s(p) for p in pids) - w0
    errors = [o for o in outs if o["error"]]
    assert not errors, errors[:3]
    return rate, sum(bool(o["info"]["correct"]) for o in outs), 1000 * cpu_s / len(items)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4000, help="items sent to the server per configuration")
    p.add_argument("--baseline-n", type=int, default=600, help="items for each in-process baseline")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--workers", type=int, default=0, help="server worker processes (0: CPU count)")
    args = p.parse_args(argv)

    items = make_items(args.n)
    base = items[: args.baseline_n]
    expect = sum(1 for it in base if it["id"] % 2 == 0)
    res: dict = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    full, c1, cpu_full = bench_in_process(base, answer_only=False)
    ans, c2, cpu_ans = bench_in_process(base, answer_only=True)
    assert c2 == expect, (c2, expect)
    res["mv_full_per_s"], res["mv_answer_per_s"] = round(full, 1), round(ans, 1)
    res["mv_full_correct"] = f"{c1}/{len(base)}"  # math-verify alone does not find the answer in the tag format
    wf_before, c3, cpu_wf = bench_worker_fn(base)
    assert c3 == expect, (c3, expect)
    rates, cpu = {}, {"mv_full": cpu_full, "mv_answer": cpu_ans, "worker_fn": cpu_wf}
    for name, fast in (("server_fast_path", True), ("server_math_verify", False)):
        cfg = MathConfig(workers=args.workers, int_fast_path=fast, judge_enabled=False)
        rate, correct, cpu[name] = bench_server(items, cfg, args.batch, args.clients)
        assert correct == sum(1 for it in items if it["id"] % 2 == 0), correct
        rates[name] = rate
    # the machine may be shared: measure the worker function again after the server runs and use the mean
    wf_after, _, _ = bench_worker_fn(base)
    wf = (wf_before + wf_after) / 2
    res["worker_fn_per_s"] = round(wf, 1)
    res["worker_fn_before_after"] = [round(wf_before, 1), round(wf_after, 1)]
    for name, rate in rates.items():
        res[f"{name}_per_s"] = round(rate, 1)
        res[f"{name}_vs_mv_full"] = round(rate / full, 2)
        res[f"{name}_vs_mv_answer"] = round(rate / ans, 2)
        res[f"{name}_vs_worker_fn"] = round(rate / wf, 2)
    res["cpu_ms_per_item"] = {k: round(v, 3) for k, v in cpu.items()}
    res["load_avg_1m_end"] = round(os.getloadavg()[0], 2)

    c = res["cpu_ms_per_item"]
    head = (
        f"{'configuration':<36}{'verif/s':>9}{'x mv_full':>11}{'x mv_answer':>13}{'x worker_fn':>13}{'CPU ms/item':>13}"
    )
    print(head)
    print(f"{'math-verify, full response, 1 proc':<36}{res['mv_full_per_s']:>9}{1.0:>11}{'':>26}{c['mv_full']:>13}")
    mva = res["mv_answer_per_s"]
    print(f"{'math-verify, answer only, 1 proc':<36}{mva:>9}{'':>11}{1.0:>13}{'':>13}{c['mv_answer']:>13}")
    print(f"{'worker function, 1 proc':<36}{res['worker_fn_per_s']:>9}{'':>24}{1.0:>13}{c['worker_fn']:>13}")
    for name in ("server_fast_path", "server_math_verify"):
        r = [res[name + k] for k in ("_per_s", "_vs_mv_full", "_vs_mv_answer", "_vs_worker_fn")]
        print(f"{name:<36}{r[0]:>9}{r[1]:>11}{r[2]:>13}{r[3]:>13}{c[name]:>13}")
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
