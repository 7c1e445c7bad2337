"""Benchmark: what the token-credit panel adds to a logged training step (verl_bot/training/panel.py, on v1).

    .venv/bin/python benchmarks/token_panel.py [--rows 256] [--group 8] [--tokens 4096] [--prompt 512]
                                               [--repeats 5]

One process holds what verl's trainer process holds at the end of a step: Ray and a real TransferQueue with the
step's trajectories, put as verl's agent loop puts them (`--rows` rollouts in groups of `--group`, prompts of
`--prompt` tokens, response lengths uniform in [1, tokens], the `bot` manager's dense token rewards
`r_t = G + 0.5 S_t` and the advantages), and verl's own `Tracking` with wandb (offline) and tensorboard.

Baseline, measured in the same run on the same step: what verl itself does for every step's metrics: its
`PPOTrainer._compute_metrics` (its TransferQueue read of the step and its metric functions) and `Tracking.log` of
those scalars to the same trackers. Measured: `panel.panel_of` and `panel.send_panel` on the step read through
`verl_bot.hooks.v1.batch.TQBatch`, all a logged step adds (its TransferQueue reads, the histograms of r_t, S_t and
A_t over every token, the panel's token records, the HTML and the Markdown panel, both trackers), at the knobs'
defaults (4 rollouts x 256 tokens) and at 4x both; and both again on a step of a quarter of the rows (what grows
with the batch: the reads and histograms; the panel itself is bounded by the knobs). Calls alternate, `--repeats`
rounds; each call's wall-clock and this process's CPU time (wandb and TensorBoard write from threads and wandb's
own service process: their enqueueing counts, not the service's uploads) is kept; best and median are printed, and
the ratios of the bests and of the medians. Also the panel's size at both settings (wandb's media file,
TensorBoard's event).

Target: a logged step at the defaults costs at most twice verl's own metrics of the step (best of the full step);
with `token_panel_every=10` a fifth of them per step or less.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot", "+reward.reward_kwargs.bot.w_local=0.5",
       "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]


def start_transfer_queue(temp: str):
    """Ray in this process and TransferQueue on it, with verl's config (as
    tests/component/test_transfer_queue_hooks.py)."""
    import ray
    import transfer_queue
    from omegaconf import OmegaConf

    from verl_bot.cpu.actor_engine import compose_trainer_config

    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
    conf = compose_trainer_config(BOT).transfer_queue
    transfer_queue.init(OmegaConf.create(OmegaConf.to_container(conf, resolve=True)))
    return transfer_queue


def put_step(tq, name: str, rows: int, group: int, tokens: int, prompt: int, vocab: int, seed: int = 0):
    """A trained step's trajectories in TransferQueue (fields as verl's agent loop and `_compute_advantage` leave
    them); returns (verl's KVBatchMeta of the step, its response tokens)."""
    import torch
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    gen = torch.Generator().manual_seed(seed)
    fields, keys = [], []
    for r in range(rows):
        uid, length = f"{name}{r // group:05d}", int(torch.randint(1, tokens + 1, (1,), generator=gen))
        local = -(torch.rand(length, generator=gen) < 0.05).float()  # toy_lint-like penalties on a few tokens
        score = float(torch.rand(1, generator=gen))
        keys.append(f"{uid}_{r % group}_0")
        fields.append({
            "uid": uid, "data_source": "toy_lint",
            "prompts": torch.randint(10, vocab, (prompt,), generator=gen),
            "responses": torch.randint(10, vocab, (length,), generator=gen),
            "response_mask": torch.ones(length, dtype=torch.int64),
            "rm_scores": score + 0.5 * local,
            "advantages": (advantages := torch.randn(length, generator=gen)),
            "returns": advantages,  # verl's grpo-like estimators return the advantages as returns
            "old_log_probs": -torch.rand(length, generator=gen),
            "num_turns": 2,
            "extra_fields": {"reward_extra_info": {"score": score, "acc": float(score > 0.5), "scorer_failed": 0.0}},
        })
    tags = [{"status": "success", "global_steps": 0, "min_global_steps": 0, "max_global_steps": 0} for _ in keys]
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id="train")
    return KVBatchMeta(partition_id="train", keys=keys, tags=tags), sum(len(f["responses"]) for f in fields)


def make_trainer(tokenizer, trackers):
    """What the hook and verl's `_compute_metrics` read of verl's trainer."""
    from verl_bot.cpu.actor_engine import compose_trainer_config

    return types.SimpleNamespace(
        config=compose_trainer_config(BOT), tokenizer=tokenizer, logger=trackers, global_steps=1,
        total_training_steps=1000, use_critic=False, _rollout_moe_lb_metrics_accumulator=None,
        _get_n_gpus_for_throughput=lambda: 1,
    )


def panel_sizes(tq, trainer, batch, settings) -> tuple[int, int]:
    """Bytes of the HTML and of the Markdown panel of `batch` at `settings`."""
    from verl_bot.hooks.v1.batch import TQBatch
    from verl_bot.observe import panels
    from verl_bot.training.panel import panel_of

    records = panel_of(trainer, TQBatch(batch), settings).records
    return tuple(len(build(1, "bot", records, settings.tokens).encode())
                 for build in (panels.panel_html, panels.panel_markdown))


def timed(fn) -> tuple[float, float]:
    """(wall-clock s, process CPU s) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256, help="rollouts of the step (default 256)")
    parser.add_argument("--group", type=int, default=8, help="rollouts per prompt (default 8)")
    parser.add_argument("--tokens", type=int, default=4096, help="longest response (default 4096)")
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens (default 512)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    import ray
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.tracking import Tracking

    from verl_bot.hooks.v1.batch import TQBatch
    from verl_bot.observe import panels
    from verl_bot.training import panel
    from verl_bot_demo.tiny_model import build_tokenizer

    logging.getLogger("transfer_queue").setLevel(logging.ERROR)  # one warning per call about this machine's cores
    temp = tempfile.mkdtemp(prefix="vbpanel", dir="/tmp")
    os.environ.update({"WANDB_MODE": "offline", "WANDB_DIR": temp, "WANDB_SILENT": "true",
                       "TENSORBOARD_DIR": os.path.join(temp, "tb")})
    tokenizer = build_tokenizer(os.path.join(temp, "tokenizer"))
    tq = start_transfer_queue(temp)
    trackers = Tracking("verl_bot_bench", "token_panel", ["wandb", "tensorboard"])
    trainer = make_trainer(tokenizer, trackers)
    shown = panel.showing_trackers(trainer.logger)
    made = {"full": put_step(tq, "f", args.rows, args.group, args.tokens, args.prompt, len(tokenizer)),
            "quarter": put_step(tq, "q", max(args.rows // 4, args.group), args.group, args.tokens, args.prompt,
                                len(tokenizer), seed=1)}
    steps = {size: batch for size, (batch, _) in made.items()}
    knobs = {"defaults": panels.PanelSettings(), "4x": panels.PanelSettings(rollouts=16, tokens=1024)}
    step = [0]

    def baseline(batch):
        metrics = {}
        PPOTrainer._compute_metrics(trainer, batch, metrics, {"step": 1.0, "gen": 0.5}, global_steps=1, epoch=0)
        trackers.log(data=metrics, step=step[0])
        return len(metrics)

    def logged_panel(batch, settings):
        panel.send_panel(shown, panel.panel_of(trainer, TQBatch(batch), settings))

    calls = {("baseline", size): (lambda b=batch: baseline(b)) for size, batch in steps.items()}
    calls |= {(name, size): (lambda b=batch, s=settings: logged_panel(b, s))
              for size, batch in steps.items() for name, settings in knobs.items()}
    times: dict[tuple, list[tuple[float, float]]] = {key: [] for key in calls}
    scalars = baseline(steps["full"])  # warm-up: imports, first writes
    for name in knobs:
        logged_panel(steps["full"], knobs[name])
    order = list(calls)
    for n in range(args.repeats):
        for key in order[n % len(order):] + order[: n % len(order)]:
            step[0] += 1
            trainer.global_steps = step[0]
            times[key].append(timed(calls[key]))
    sizes = {name: panel_sizes(tq, trainer, steps["full"], settings) for name, settings in knobs.items()}
    trackers.finish()
    tq.close()
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)

    print(f"full step: {args.rows} rollouts in groups of {args.group}, {made['full'][1]} response tokens "
          f"(1..{args.tokens} each), prompts of {args.prompt}; quarter step: {len(steps['quarter'].keys)} rollouts, "
          f"{made['quarter'][1]} tokens; trackers: wandb (offline), tensorboard; "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    stats = {}  # key -> (best wall, median wall, median cpu)
    for key, runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        stats[key] = (min(walls), statistics.median(walls), statistics.median(cpus))
        what = f"verl's _compute_metrics + Tracking.log of {scalars} scalars" if key[0] == "baseline" else \
            f"panel at {key[0]} ({knobs[key[0]].rollouts} rollouts x {knobs[key[0]].tokens} tokens)"
        print(f"{key[1]:>7} step, {what}: wall best {stats[key][0] * 1e3:.1f} ms median {stats[key][1] * 1e3:.1f} ms; "
              f"cpu median {stats[key][2] * 1e3:.1f} ms")
    for size in steps:
        for name in knobs:
            best, median, cpu = (m / b for m, b in zip(stats[(name, size)], stats[("baseline", size)], strict=True))
            print(f"ratio panel/baseline ({size} step, {name}): wall best {best:.2f} median {median:.2f}, cpu median "
                  f"{cpu:.2f}; per step at token_panel_every=10: {median / 10:.3f}")
    for name, (page, text) in sizes.items():
        print(f"panel size at {name}: HTML {page / 1024:.0f} KiB (wandb's media file), Markdown {text / 1024:.0f} KiB "
              "(TensorBoard's event)")
    grow = stats[("4x", "full")][0] / stats[("defaults", "full")][0]
    shrink = stats[("defaults", "quarter")][0] / stats[("defaults", "full")][0]
    print(f"ratio panel 4x/defaults (full step): wall best {grow:.2f}; quarter/full step (defaults): wall best "
          f"{shrink:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
