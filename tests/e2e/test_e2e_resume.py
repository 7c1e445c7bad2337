"""`bot` through verl 0.9.1's real trainer on the CPU backend (hf rollout), and a run that survives a kill.

`ALGO=bot STEPS=4 bash recipes/cpu_train.sh trainer.save_freq=2` with a KL loss (a reference model on the CPU), a
scorer that fails on some responses and `rollout.full_determinism` (the hf rollout's samples then depend on the seed,
the weights and the prompts alone), three times: once without a stop (the reference); once killed with SIGKILL, the
launcher, verl's driver and every Ray process of the run at once (a preemption), during step 3; then the same
command again, which resumes from the step-2 checkpoint (`trainer.resume_mode=auto`, verl's default) and finishes.
The reference's steps 1-2 also carry the checks of the `bot` path (one start shared).

Checked on steps 1-2 of the reference, from the rollout server, verl's metrics and the probe of
tests/harness/trainer.py:
- dense rewards reach the estimator; weights move and the rollout server gets them every step;
- the advantages of a step are BoT's (the slow reference of tests/harness/references.py) of the composed token
  rewards of the rollouts whose scorer answered, and 0 on every token of those whose scorer failed;
- the advantages the actor's loss used are those (rows matched by their old log-probs);
- the reference model ran (actor/kl_loss); the step's metrics carry the reward and estimator diagnostics; the token
  records of step 1 are that step's rows.
The reference also logs to wandb (offline) and tensorboard: its token-credit panels and S_t/A_t histograms (issue 37)
are read back from both trackers' files equal to its token records (`check_trackers`).
Checked on the kill and the resume, against the reference: the metrics file holds every step once, the killed
launch's steps 1-2 kept (verl_bot/hooks/resume.py); each step trained the same prompts with the same responses and
rewards (the dataloader continues where the checkpoint left it: the 4 steps of 8 prompts train each of the 32
prompts of the epoch once); the actor's weights after step 2 (killed launch) and step 4 (resumed launch) are
bit-equal to the reference's (under full_determinism verl-bot's replay-buffer hook gives every batch its rows in one
order); the token report's chosen steps are each written once, with
the reference's rows. Stopping a launcher (SIGTERM) stops its run: tests/component/test_recipe_supervision.py,
tests/component/test_run_safety.py (the driver's SIGTERM) and tests/e2e/test_cpu_e2e.py (Ctrl-C: no Ray process left).

    .venv/bin/python -m pytest -q tests/e2e/test_e2e_resume.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.harness.trainer import Run, check_bot_advantages, check_token_records, kill_in_step_3
from verl_bot.observe.token_records import read_records, recorded_files

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]


def launch(root: Path, name: str, out_dir: Path, trackers: bool = False) -> Run:
    """`bash recipes/cpu_train.sh` of a 4-step `bot` run saving every 2 steps into `out_dir`, started: a KL loss,
    seven prompts in eight scored by the flaky scorer of tests/harness/trainer.py, every row of steps 1 and 4 recorded,
    the rollout's samples a function of the seed, the weights and the prompts. `trackers`: also wandb (offline) and
    tensorboard, with token-credit panels of 6 rollouts x 16 tokens at steps 1, 2 and 4 (`token_panel_every=2`)."""
    run = Run(root, name, [])
    run.cmd = ["bash", str(ROOT / "recipes" / "cpu_train.sh"), "trainer.save_freq=2", "data.shuffle=True",
               "+algorithm.token_report_steps=[1,4]", "+algorithm.token_report_groups=0",
               "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.01",
               "actor_rollout_ref.rollout.full_determinism=True",
               "+reward.reward_kwargs.bot.scorers.toy_flaky=python:vb_probe:flaky_toy_lint"]
    run.env.update({"ALGO": "bot", "STEPS": "4", "ROLLOUT": "hf", "TIMEOUT_S": "600",
                    "PY": str(ROOT / ".venv" / "bin" / "python"), "OUT_DIR": str(out_dir),
                    "MODEL_DIR": str(root / "model"), "DATA_DIR": str(root / "data")})
    if trackers:
        run.cmd += ["trainer.logger=[console,file,wandb,tensorboard]", "+algorithm.token_panel_every=2",
                    "+algorithm.token_panel_rollouts=6", "+algorithm.token_panel_tokens=16"]
        run.env.update({"WANDB_MODE": "offline", "WANDB_DIR": str(out_dir), "WANDB_SILENT": "true",
                        "TENSORBOARD_DIR": str(out_dir / "tensorboard")})
    (root / "data").mkdir(exist_ok=True)
    for split, source in (("train", "train_flaky.parquet"), ("test", "val.parquet")):  # cpu_train.sh's file names
        target = root / "data" / f"{split}.parquet"
        if not target.exists():
            target.symlink_to(root / source)
    return run.start()


def rollouts(out: Path, step: int) -> list[tuple]:
    """A step's dumped rollouts (verl's trainer.rollout_data_dir) as sorted (prompt, response, score) rows."""
    rows = [json.loads(ln) for ln in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines() if ln.strip()]
    return sorted((r["input"], r["output"], round(float(r["score"]), 6)) for r in rows)


def weight_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state dicts of the same tensors."""
    assert sorted(a) == sorted(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def actor_weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    state = torch.load(out / "ckpt" / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt",
                       map_location="cpu", weights_only=False)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def test_a_killed_bot_run_resumes_from_its_checkpoint_as_if_never_stopped(workdir):
    ref_out, out = workdir / "resume_ref", workdir / "resume_out"
    reference = launch(workdir, "resume_ref", ref_out, trackers=True)  # the two first launches side by side
    killed = launch(workdir, "resume_1", out)
    kill_in_step_3(killed, out)
    try:
        rc = reference.wait(timeout=600)
    finally:
        reference.cleanup()
    assert rc == 0, reference.output(6000)
    check_bot_steps(reference, ref_out, workdir)
    check_trackers(ref_out)
    steps_before = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    assert steps_before[:2] == [1, 2] and set(steps_before) <= {1, 2, 3}, steps_before

    resumed = launch(workdir, "resume_2", out)
    try:
        rc = resumed.wait(timeout=600)
    finally:
        resumed.cleanup()
    assert rc == 0, resumed.output(6000)
    log = resumed.output()
    assert "Resuming from" in log and "global_step_2" in log, log[-4000:]
    assert "resumed at step 2: 2 metric lines of the steps before it kept" in log, log[-4000:]

    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    assert [r["step"] for r in records if "actor/pg_loss" in r["data"]] == [1, 2, 3, 4], records
    for step in (1, 2, 3, 4):  # the killed launch's 1-2, the resumed one's 3-4: the reference's, row for row
        assert rollouts(out, step) == rollouts(ref_out, step), step
        assert len({prompt for prompt, _, _ in rollouts(out, step)}) == 8, step  # 8 prompts x 4 rollouts a step
    assert len({prompt for step in (1, 2, 3, 4) for prompt, _, _ in rollouts(out, step)}) == 32  # none twice
    # the weights, bit-equal to the reference's after step 2 (the killed launch) and after step 4 (the resumed one):
    # the same rows in the same order (under full_determinism the replay buffer gives a batch its rows in put order:
    # verl_bot/hooks/v1/replay_buffer.py) and the optimizer's state restored; steps 3-4 moved them
    for step in (2, 4):
        ours, theirs = actor_weights(out, step), actor_weights(ref_out, step)
        assert sorted(ours) == sorted(theirs)
        differ = [k for k in ours if not torch.equal(ours[k], theirs[k])]
        assert not differ, (step, len(differ), differ[:3], weight_distance(ours, theirs))
    update = weight_distance(actor_weights(ref_out, 4), actor_weights(ref_out, 2))
    assert update > 1e-4, update
    files = recorded_files(out / "ckpt" / "token_records")
    assert list(files) == [1, 4]
    for step in (1, 4):  # each chosen step's rows once, the reference's (uids are drawn anew by every run)
        def row(r):
            return tuple(r["response_ids"]), tuple(round(x, 4) for x in r["advantages"])
        assert sorted(map(row, read_records(files[step]))) == sorted(
            map(row, read_records(recorded_files(ref_out / "ckpt" / "token_records")[step]))), step
    print(f"resumed run: step-4 weights bit-equal to the uninterrupted run's (steps 3-4 moved them by {update:.1e})")


def check_bot_steps(run: Run, out: Path, root: Path) -> None:
    """Steps 1 and 2 of a `launch` (8 prompts x 4 rollouts a step)."""
    # the rollout server got the trainer's weights before every step, and they changed with training
    events = run.rollout_events()
    updates = [e for e in events if e["event"] == "update_weights" and e["global_steps"] <= 2]
    start = [e for e in events if e["event"] == "start"]
    assert len(start) == 1, events
    assert [e["global_steps"] for e in updates] == [0, 1, 2], updates
    assert [e["weight_version"] for e in updates] == [1, 2, 3], updates
    assert updates[0]["checksum"] == start[0]["checksum"], "initial sync must carry the model as loaded from disk"
    assert updates[1]["checksum"] != updates[0]["checksum"], "actor weights did not change after step 1"
    assert updates[2]["checksum"] != updates[1]["checksum"], "actor weights did not change after step 2"

    # verl's metrics: the rollout sampled with the trainer's weights, the reference model, our metrics
    metrics = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"] and m["step"] <= 2}
    assert sorted(steps) == [1, 2], metrics
    for step, data in steps.items():
        # fp32 on both sides (verl_bot/cpu/overrides.txt): the rollout samples with exactly the actor's weights
        assert data["training/rollout_probs_diff_mean"] < 1e-6, (step, data["training/rollout_probs_diff_mean"])
        assert data["actor/grad_norm"] > 0, (step, data["actor/grad_norm"])
        assert "actor/kl_loss" in data, sorted(data)
        for key in ("reward/score/mean", "reward/acc/mean", "reward/scorer_failed/mean", "bot/adv_abs_max"):
            assert key in data, (key, sorted(data))
    assert any(data["reward/scorer_failed/mean"] > 0 for data in steps.values())

    # the `bot` estimator received dense per-token rewards (not one scalar on the last token)
    calls = run.records()
    estimator_calls = [c for c in calls if c.get("estimator") == "bot"][:2]
    assert len(estimator_calls) == 2, calls
    for call in estimator_calls:
        assert call["mask_dtype"] == "torch.int64"  # the response mask verl 0.9.1's v1 trainer passes
        rows = call["rows"]
        assert len(rows) == 32
        assert any(r["nonzero_before_last"] > 0 for r in rows), rows
        assert any(r["distinct"] >= 2 for r in rows), "no local (span) penalties in any row: " + str(rows)

    # the step's advantages, and the token records of step 1 (tests/harness/trainer.py)
    advantage_steps = [c["rows"] for c in calls if c.get("step") == "advantage"]
    check_bot_advantages(advantage_steps[:2])
    check_token_records(out / "ckpt" / "token_records", advantage_steps[0], root / "model")

    # what the actor's loss used: the same advantages, row by row (matched by old log-probs); every row of steps
    # 1-2 was trained on (a loss row of step 3 matches its own step's advantages, if the stop came after them)
    def key(r):
        return tuple(round(x, 5) for x in r["old_log_probs"])

    by_old = {key(r): r for rows in advantage_steps for r in rows}
    first_two = {key(r) for rows in advantage_steps[:2] for r in rows}
    loss_rows = [r for c in calls if c.get("step") == "loss" for r in c["rows"]]
    for r in loss_rows:
        torch.testing.assert_close(torch.tensor(r["advantages"]), torch.tensor(by_old[key(r)]["advantages"]))
    assert sum(key(r) in first_two for r in loss_rows) == 64, len(loss_rows)


def check_trackers(out: Path) -> None:
    """The token-credit panels and histograms the reference run left in wandb's offline run and TensorBoard's
    event files (tests/harness/trackers.py reads them), against its token records of steps 1 and 4 (every
    row)."""
    from tests.harness.trackers import check_panel, html_panel, markdown_panel, tensorboard_panels, wandb_panels

    lines = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    metrics = {line["step"]: line["data"] for line in lines}
    assert [s for s in sorted(metrics) if "timing_s/verl_bot_panel" in metrics[s]] == [1, 2, 4]  # every 2nd, last
    wandb, (texts, histograms, scalars) = wandb_panels(out), tensorboard_panels(out / "tensorboard")
    assert sorted(wandb) == sorted(texts) == [1, 2, 4]
    assert {"reward/score/mean", "actor/pg_loss", "timing_s/verl_bot_panel"} <= scalars  # verl's scalars stay
    files = recorded_files(out / "ckpt" / "token_records")
    for step in (1, 4):
        records = read_records(files[step])
        for rollouts in (html_panel(wandb[step]["html"])[0], markdown_panel(texts[step])):
            check_panel(rollouts, records, 16)
            # the groups of the smallest prompts (as the records are sorted), the first whole, 6 rollouts
            assert [r["key"] for r in rollouts[:4]] == [r["key"] for r in records[:4]]
            assert len(rollouts) == 6 and {r["key"].split("_")[0] for r in rollouts[4:]} == {records[4]["uid"]}
        # the histograms: every token of the step (the records hold every row); S_t = (r_t - G) / w_s, w_s = 0.5
        # (cpu_train.sh's W_LOCAL for toy_lint), w_g = 1
        values = {"verl_bot/r_t": [x for r in records for x in r["rewards"]],
                  "verl_bot/A_t": [x for r in records for x in r["advantages"]],
                  "verl_bot/S_t": [(x - r["info"]["score"]) / 0.5 for r in records for x in r["rewards"]]}
        for key, expected in values.items():
            counts, bins = wandb[step]["histograms"][key]
            assert sum(counts) == len(expected) and bins[0] == pytest.approx(min(expected), abs=1e-5), key
            board = histograms[key][step]
            assert board.num == len(expected) and board.sum == pytest.approx(sum(expected), abs=1e-3), key
        assert min(values["verl_bot/S_t"]) == pytest.approx(-1.0, abs=1e-5)  # toy_lint's penalty S = -1
