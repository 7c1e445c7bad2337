"""Benchmark: what GRAIL adds to verl's actor update, against GRPO's update on the same CPU config and batch.

    .venv/bin/python benchmarks/grail_update.py [--hidden 256] [--layers 4] [--rows 16] [--prompt 64]
        [--response 448] [--micro 4] [--repeats 5]

verl 0.9.1's real actor engine (`FSDPEngineWithLMHead`, FSDP2, one gloo rank, the CPU backend and the CPU
overrides of `verl_bot/cpu/overrides.txt`, i.e. the engine `recipes/cpu_train.sh` trains with) on a
locally built Qwen2-style model (`--hidden`, `--layers`). The batch: `--rows` rollouts in verl's
TransferQueue layout, prompts of `--prompt` tokens, responses of `--response/2..--response` tokens, each
ending in an answer span (marker, 6 content tokens, closing, 1 token after) on 3 of 4 rows, GRPO
advantages of +-1, micro-batches of `--micro` rows.

Time: one update = `engine.train_batch` (forward and backward of every micro-batch, optimizer step), as
verl's worker runs it. GRPO and GRAIL updates alternate in one process; best of `--repeats` each; the
ratio grail/grpo is printed for wall-clock and for the process's CPU time (steadier on a shared machine,
with `--threads 1`: no thread spin-waiting counted),
with the median share of GRAIL's update spent in the saliency (its `grail/saliency_s` metric).
Memory: peak extra resident memory of one update (VmHWM reset before it, minus VmRSS before it), in a
fresh process per algorithm with glibc's mmap threshold lowered so freed buffers return to the OS.
Trainer side: the time to find the answer spans of the batch's responses and map them to tokens
(`verl_bot.advantage.grail_update.response_span_codes`, the tiny model's byte-level BPE tokenizer), per 1000
response tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALGOS = ("grpo", "grail")


def make_rows(args, vocab: int, seed: int = 0):
    """Sequences, prompt lengths, advantages, old log-probs and GRAIL span codes of the benchmark batch."""
    import torch

    from verl_bot.advantage.grail import SPAN_AFTER, SPAN_CONTENT, SPAN_MARKER

    gen = torch.Generator().manual_seed(seed)
    seqs, prompts, advs, old, codes = [], [], [], [], []
    for row in range(args.rows):
        n = int(torch.randint(args.response // 2, args.response + 1, (1,), generator=gen))
        seqs.append(torch.randint(3, vocab, (args.prompt + n,), generator=gen))
        prompts.append(args.prompt)
        advs.append(1.0 if row % 2 else -1.0)
        old.append(torch.full((n,), -float(torch.log(torch.tensor(float(vocab))))))
        code = torch.zeros(n, dtype=torch.int8)
        if row % 4 != 3:  # marker, 6 content tokens, closing, then one token after
            code[n - 9] = SPAN_MARKER
            code[n - 8 : n - 2] = SPAN_CONTENT
            code[n - 2] = SPAN_MARKER
            code[n - 1] = SPAN_AFTER
        codes.append(code)
    return seqs, prompts, advs, old, codes


def span_codes_ms_per_1k_tokens(args, model_dir: str) -> float:
    """Trainer-side cost of GRAIL's span codes: responses of --response tokens ending in `<final>7</final>`."""
    import torch
    from transformers import AutoTokenizer

    from verl_bot.advantage.grail_update import response_span_codes

    tok = AutoTokenizer.from_pretrained(model_dir)
    tail = tok.encode("<final>7</final>", add_special_tokens=False)
    gen = torch.Generator().manual_seed(0)
    rows = [torch.cat([torch.randint(3, len(tok), (args.response - len(tail),), generator=gen), torch.tensor(tail)])
            for _ in range(args.rows)]
    start = time.perf_counter()
    codes = response_span_codes(tok, [row.tolist() for row in rows], "auto")
    elapsed = time.perf_counter() - start
    assert all(c.any() for c in codes)
    return 1000 * elapsed / (sum(len(r) for r in rows) / 1000)


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(args) -> dict:
    """In this process: build the engine, run the updates, return timings (or the memory of `args.memory`)."""
    os.environ["VERL_PLATFORM"] = "cpu"
    import torch

    import verl_bot.plugin

    if args.threads:
        torch.set_num_threads(args.threads)
    verl_bot.plugin.register()
    from verl_bot.advantage.grail import SETTINGS_KEY, SPAN_FIELD, GrailSettings
    from verl_bot.cpu.actor_engine import actor_batch, build_actor_engine, init_process_group

    init_process_group(args.port)
    engine, loss = build_actor_engine(
        args.model_dir,
        [
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.rows}",
            "actor_rollout_ref.rollout.n=1",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro}",
        ],
    )
    seqs, prompts, advs, old, codes = make_rows(args, engine.model_config.hf_config.vocab_size)
    settings = {SETTINGS_KEY: GrailSettings().as_dict()}

    def update(algo: str) -> tuple[float, float, float]:
        batch = actor_batch(
            seqs, prompts, advs, old, extra={SPAN_FIELD: codes}, micro_batch_size=args.micro,
            non_tensor=settings if algo == "grail" else None,
        )
        with engine.train_mode():
            start, start_cpu = time.perf_counter(), time.process_time()
            out = engine.train_batch(batch, loss_function=loss)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        saliency = out["metrics"].get("grail/saliency_s")
        return elapsed, cpu, float(sum(saliency.values)) if saliency is not None else 0.0

    if args.memory:
        update(args.memory)  # warm-up: lazy initialisations, optimizer state
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (VmHWM)
        before = _rss_kb("VmRSS")
        update(args.memory)
        return {"peak_extra_mb": (_rss_kb("VmHWM") - before) / 1024}
    times: dict[str, list[float]] = {algo: [] for algo in ALGOS}
    cpu_times: dict[str, list[float]] = {algo: [] for algo in ALGOS}
    saliency: list[float] = []
    update("grpo")  # warm-up
    update("grail")
    for _ in range(args.repeats):
        for algo in ALGOS:
            elapsed, cpu, sal = update(algo)
            times[algo].append(elapsed)
            cpu_times[algo].append(cpu)
            if algo == "grail":
                saliency.append(sal / elapsed)
    return {"times": times, "cpu_times": cpu_times, "saliency_share": sorted(saliency)[len(saliency) // 2],
            "threads": torch.get_num_threads(), "load": os.getloadavg()[0]}


def run_worker(args, extra: list[str], env: dict) -> dict:
    cmd = [sys.executable, __file__, "--worker", *extra, *(f"--{k.replace('_', '-')}={v}" for k, v in (
        ("model_dir", args.model_dir), ("rows", args.rows), ("prompt", args.prompt), ("response", args.response),
        ("micro", args.micro), ("repeats", args.repeats), ("port", args.port), ("threads", args.threads))
    )]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"benchmark worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=448)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads in the workers (0: torch's default)")
    parser.add_argument("--port", type=int, default=29400 + os.getpid() % 500)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory", choices=ALGOS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return

    from verl_bot_demo.tiny_model import build_model

    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    with tempfile.TemporaryDirectory(prefix="grail_bench") as tmp:
        args.model_dir = tmp
        model, _ = build_model(tmp, hidden_size=args.hidden, num_layers=args.layers)
        params = sum(p.numel() for p in model.parameters())
        span_ms = span_codes_ms_per_1k_tokens(args, tmp)
        timing = run_worker(args, [], env)
        mem_env = {**env, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
        memory = {algo: run_worker(args, [f"--memory={algo}"], mem_env)["peak_extra_mb"] for algo in ALGOS}
    best = {algo: min(timing["times"][algo]) for algo in ALGOS}
    best_cpu = {algo: min(timing["cpu_times"][algo]) for algo in ALGOS}
    print(f"model {params / 1e6:.2f}M parameters ({args.layers} layers, hidden {args.hidden}); batch {args.rows} "
          f"rollouts, prompt {args.prompt}, response {args.response // 2}-{args.response} tokens, micro-batches "
          f"of {args.micro}; best of {args.repeats}; {timing['threads']} torch threads, load average "
          f"{timing['load']:.1f}")
    for algo in ALGOS:
        runs = " / ".join(f"{t:.2f}" for t in timing["times"][algo])
        print(f"{algo} update: best {best[algo]:.3f} s wall ({runs}), {best_cpu[algo]:.3f} s CPU; "
              f"peak extra memory {memory[algo]:.0f} MB")
    print(f"grail saliency share of its update (median): {timing['saliency_share']:.2f}")
    print(f"grail span codes (trainer side): {span_ms:.1f} ms per 1000 response tokens")
    print(f"ratio grail/grpo update time {best['grail'] / best['grpo']:.2f} (wall), "
          f"{best_cpu['grail'] / best_cpu['grpo']:.2f} (CPU)")
    print(f"ratio grail/grpo update peak memory {memory['grail'] / max(memory['grpo'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
