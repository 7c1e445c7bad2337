"""PASS end to end, killed and resumed: `ALGO=pass STEPS=3 bash recipes/cpu_train.sh trainer.save_freq=2` through
verl 0.9.1's real trainer on the CPU backend.

Two trainer starts (the recipe itself, the `Run` helper of tests/harness/trainer.py for timeouts and cleanup): the
first is killed with SIGKILL, every process of the run at once, during step 3 (after the step-2 checkpoint); the
same command then resumes from that checkpoint and trains step 3. A probe module, imported by verl in every
process (`VERL_USE_EXTERNAL_MODULES`), records:

- at the estimator (driver): the reward streams `pass` finds active (format included: the toy_lint scorer here
  also reports a format part, as the math server does), each row's verdict parts, old log-probs and the
  advantages `pass` returns;
- at the update (actor worker): verl's `vanilla` policy loss, wrapped in its registry, records the advantages
  and old log-probs it is called with.

The test recomputes PASS's advantages from the recorded streams with the slow reference
(tests/harness/references.py), and matches every row of the update to its row at the estimator by its old
log-probs: the advantages the actor used are `pass`'s, in steps 1-2 of the
killed launch and in the resumed step 3 (whose batch context is built anew by the resumed trainer); the metrics
file holds steps 1-3 once, PASS's own among them.

    .venv/bin/python -m pytest -q tests/e2e/test_e2e_pass.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tests.harness.references import reference_pass
from tests.harness.trainer import Run, kill_in_step_3, probe_records
from verl_bot.advantage.pass_ import PassSettings

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]
FORMATS = (0.2, -1.0)

PROBE = '''
"""Test probe (loaded by verl via VERL_USE_EXTERNAL_MODULES): records what `pass` and verl's `vanilla` loss see."""
import json, os
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo import core_algos
from verl_bot_demo.scorers import toy_lint


def toy_lint_with_format(prompt, response, ground_truth=None, extra_info=None):
    """toy_lint plus a format part (+0.2 for a response of even length, -1.0 for odd), as the math server reports."""
    verdict = toy_lint(prompt, response, ground_truth, extra_info)
    verdict["global"]["parts"]["format"] = 0.2 if len(response) % 2 == 0 else -1.0
    return verdict


def _record(kind, payload):
    with open(os.environ["VB_PROBE_FILE"], "a") as f:
        f.write(json.dumps({"kind": kind, "pid": os.getpid(), **payload}) + "\\n")


_pass = core_algos.get_adv_estimator_fn("pass")


def pass_probe(**kwargs):
    from verl_bot.credit.context import current
    from verl_bot.credit.streams import active_streams

    mask = kwargs["response_mask"]
    ctx = current()
    streams = active_streams("pass", ("local", "outcome", "format"), mask)
    advantages, returns = _pass(**kwargs)
    m = mask.bool()
    rows = []
    for i in range(mask.shape[0]):
        info = ctx.rows[i].get("reward_extra_info") or {}
        rows.append({
            "uid": str(kwargs["index"][i]),
            **{name: streams[name][i][m[i]].tolist() for name in streams},
            "stream_padding": sum(float(s[i][~m[i]].abs().sum()) for s in streams.values()),
            "format_part": info.get("format"),
            "solved": info.get("solved"),
            "old_log_probs": ctx.tensors["old_log_probs"][i][m[i]].tolist(),
            "advantages": advantages[i][m[i]].tolist(),
            "returns_are_advantages": bool((returns == advantages).all()),
        })
    _record("estimator", {"rows": rows, "metrics": dict(ctx.metrics)})
    return advantages, returns


core_algos.ADV_ESTIMATOR_REGISTRY["pass"] = pass_probe
_vanilla = core_algos.get_policy_loss_fn("vanilla")


def vanilla_probe(old_log_prob, log_prob, advantages, response_mask, *args, **kwargs):
    m = response_mask.bool()
    rows = [
        {"old_log_probs": old_log_prob[i][m[i]].tolist(), "advantages": advantages[i][m[i]].tolist()}
        for i in range(m.shape[0])
    ]
    _record("update", {"rows": rows})
    return _vanilla(old_log_prob, log_prob, advantages, response_mask, *args, **kwargs)


core_algos.POLICY_LOSS_REGISTRY["vanilla"] = vanilla_probe
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model_dir) -> Path:
    root = tmp_path_factory.mktemp("e2e_pass")
    (root / "probe").mkdir()
    (root / "probe" / "vb_pass_probe.py").write_text(PROBE)
    return root


def launch(workdir: Path, name: str, out: Path, model: Path) -> Run:
    """The PASS recipe's 3-step run saving every 2 steps into `out`, started."""
    run = Run(workdir, name, [])
    run.cmd = [
        "bash",
        str(ROOT / "recipes" / "cpu_train.sh"),
        "trainer.save_freq=2",
        "+reward.reward_kwargs.bot.scorers.toy_lint=python:vb_pass_probe:toy_lint_with_format",
    ]
    run.env.update(
        {
            "ALGO": "pass",
            "STEPS": "3",
            "OUT_DIR": str(out),
            "MODEL_DIR": str(model),
            "DATA_DIR": str(workdir / "data"),
            "PY": sys.executable,
            "VERL_USE_EXTERNAL_MODULES": "vb_pass_probe",
            "PYTHONPATH": os.pathsep.join([str(workdir / "probe"), os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
        }
    )
    return run.start()


def test_pass_killed_in_step_3_resumes_and_the_actor_uses_its_advantages_throughout(workdir, tiny_model_dir):
    out = workdir / "pass_out"
    killed = launch(workdir, "pass_1", out, tiny_model_dir)
    kill_in_step_3(killed, out)
    check_records(probe_records(killed.probe), steps=2)  # steps 1-2; a step 3 cut short by the kill is left out
    resumed = launch(workdir, "pass_2", out, tiny_model_dir)
    try:
        rc = resumed.wait(timeout=600)
    finally:
        resumed.cleanup()
    assert rc == 0, resumed.output(6000)
    assert "Resuming from" in resumed.output() and "global_step_2" in resumed.output(), resumed.output(4000)
    check_records(probe_records(resumed.probe), steps=1)  # the resumed step 3
    metrics = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    steps = {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}
    assert [m["step"] for m in metrics if "actor/pg_loss" in m["data"]] == [1, 2, 3], metrics  # each once
    for data in steps.values():
        assert data["pass/chunks_per_rollout"] >= 1.0 and data["pass/tokens_per_chunk"] >= 1.0
        shares = [data[f"pass/share_{name}"] for name in ("outcome", "format", "process")]
        assert sum(shares) == pytest.approx(1.0, abs=1e-6) and data["pass/share_format"] > 0, shares
        assert data["verl_bot/scorer_failed_rows"] == 0 and 0.0 <= data["reward/solved/mean"] <= 1.0


def check_records(records: list[dict], steps: int) -> None:
    """What the probe of one launch must show for its first `steps` steps (8 prompts x 4 rollouts a step)."""
    estimator = [r for r in records if r["kind"] == "estimator"][:steps]
    updates = [r for r in records if r["kind"] == "update"]
    assert len(estimator) == steps, [r["kind"] for r in records]  # one advantage computation per step

    # 1. the streams arrived at `pass`, format included, and `pass` computed what the slow reference computes
    seen_formats = set()
    for call in estimator:
        rows = call["rows"]
        assert len(rows) == 32 and all(r["advantages"] for r in rows)  # the recipe's 8 prompts x 4 rollouts
        for r in rows:
            assert r["stream_padding"] == 0.0
            assert r["outcome"][:-1] == [0.0] * (len(r["outcome"]) - 1) and r["outcome"][-1] == r["solved"]
            assert r["format"][:-1] == [0.0] * (len(r["format"]) - 1)
            assert r["format"][-1] == pytest.approx(r["format_part"], abs=1e-7)  # float32 in the stream
            assert r["format_part"] in FORMATS and r["returns_are_advantages"]
            seen_formats.add(r["format_part"])
        assert any(v != 0 for r in rows for v in r["local"]), "no local (process) signal in any row"
        expected = reference_pass([r["local"] for r in rows], [[1] * len(r["local"]) for r in rows],
                                  [r["solved"] for r in rows], [r["format_part"] for r in rows],
                                  [r["uid"] for r in rows], PassSettings())
        for r, want in zip(rows, expected, strict=True):
            torch.testing.assert_close(torch.tensor(r["advantages"], dtype=torch.float64),
                                       torch.tensor(want, dtype=torch.float64), atol=1e-4, rtol=1e-4)
        assert any(a != 0 for want in expected for a in want)
    assert seen_formats == set(FORMATS), seen_formats

    # 2. the actor's loss got exactly those advantages: rows matched by their old log-probs
    by_old_log_probs = {}
    for call in estimator:
        for r in call["rows"]:
            by_old_log_probs.setdefault(tuple(r["old_log_probs"]), []).append(r["advantages"])
    update_rows = [r for call in updates for r in call["rows"] if tuple(r["old_log_probs"]) in by_old_log_probs]
    assert len(update_rows) == 32 * steps, len(update_rows)  # 32 rollouts a step, one update each
    assert len({tuple(r["old_log_probs"]) for r in update_rows}) == len(by_old_log_probs)  # every row was trained on
    for r in update_rows:
        candidates = by_old_log_probs[tuple(r["old_log_probs"])]
        assert any(
            torch.allclose(torch.tensor(r["advantages"]), torch.tensor(c), atol=1e-6, rtol=0) for c in candidates
        ), (r["advantages"], candidates)
    assert {c["pid"] for c in updates}.isdisjoint({c["pid"] for c in estimator})  # the actor worker's own process
