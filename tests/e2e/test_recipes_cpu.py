"""The paper's recipes on a CPU: `SMOKE=1 bash recipes/<task>_<model>.sh` through verl's trainer and vLLM rollout.

Each test runs a recipe as a user does (`SMOKE=1 ALGO=... bash recipes/react_qwen.sh`): on a machine without a GPU
it runs on the CPU platform (`PLATFORM=cpu`, verl_bot/recipes/settings.py) with verl's own vLLM rollout on vLLM's
CPU build,
the recipe's own composed overrides (only sizes, the platform and the model change), its reward server started by
the recipe (the React server with real esbuild, ESLint and Chromium; the math server), and a judge that is a real
`vllm serve` of a tiny local model on loopback (one for the module): it answers at random, and the reward servers
must turn whatever it says into verdicts and flags; in the React and AIME `bot` runs it stops answering during step 2
and comes back (`JudgeOutage`). The GRAIL run is a 1-step smoke (`SMOKE_STEPS=1`), launched again with
`SMOKE_STEPS=2`: it resumes from its step-1 checkpoint. The models are the tiny local ones the recipes build, made
here once: the React one warm-started to write a ```tsx component, the AIME one on toy_math problems in the AIME
prompt's wording (recipes/data/aime_cpu.jsonl). A probe module (loaded by verl in every process through
`VERL_USE_EXTERNAL_MODULES`) records what the GRPO-VPS estimator and agent loop and GRAIL's loss see.

    .venv/bin/python -m pytest -q tests/e2e/test_recipes_cpu.py
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_http
from tests.harness.references import reference_vps
from tests.harness.trainer import MARK_ENV, kill_marked
from verl_bot.advantage.grail import GrailSettings
from verl_bot.advantage.vps import DEFAULT_STD_FLOOR
from verl_bot.launch.families import BY_RECIPE_TAG, FAMILIES

pytestmark = pytest.mark.timeout(900)
W_MAX = GrailSettings().w_max  # the recipes leave grail_w_max at its default
ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

PROBE = '''
"""Test probe: the GRPO-VPS estimator's rows and progress, every belief probe with its answer log-prob, GRAIL."""
import json, os, time
import verl_bot.plugin
verl_bot.plugin.register()
from verl.trainer.ppo import core_algos
from verl_bot.credit.context import current
import verl_bot.vps.agent_loop as agent_loop


def _write(record, name):
    with open(os.path.join(os.environ["VB_PROBE_DIR"], name), "a") as f:
        f.write(json.dumps(record) + "\\n")


_vps = core_algos.get_adv_estimator_fn("vps")
_grpo = core_algos.get_adv_estimator_fn("grpo")


def vps_probe(**kwargs):
    start = time.time()
    adv, ret = _vps(**kwargs)
    config = kwargs["config"]
    grpo, _ = _grpo(token_level_rewards=kwargs["token_level_rewards"], response_mask=kwargs["response_mask"],
                    index=kwargs["index"], norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True))
    progress = (adv - grpo) / float(config.vps_alpha)
    mask = kwargs["response_mask"].bool()
    rows = []
    for i, row in enumerate(current().rows):
        n = int(mask[i].sum())
        rows.append({"uid": str(kwargs["index"][i]), "length": n, "record": row["verl_bot_vps"],
                     "solved": (row.get("reward_extra_info") or {}).get("solved"),
                     "grpo": float(grpo[i, 0]) if n else 0.0, "progress": progress[i, :n].tolist()})
    _write({"time": start, "rows": rows}, "vps.jsonl")
    return adv, ret


core_algos.ADV_ESTIMATOR_REGISTRY["vps"] = vps_probe
_probe = agent_loop.VPSAgentLoop._probe


async def probe(self, ids):
    out = await _probe(self, ids)
    entries = (out.extra_fields or {}).get("prompt_logprobs")
    _write({"time": time.time(), "ids": list(ids), "prompt_logprobs": entries}, "probes.jsonl")
    return out


agent_loop.VPSAgentLoop._probe = probe

# GRAIL: what its loss wrapper hands to verl's ppo_loss, per actor micro-batch
import verl_bot.hooks.engine_forward_step as efs

_weighted_loss = efs.weighted_loss

def weighted_loss(loss_function, row_weights, stats, prefix):
    record = {"weights": [w.tolist() for w in row_weights], "stats": stats}

    def at_verl_loss(model_output, data, dp_group=None):  # stands between the wrapper and verl's ppo_loss
        record["at_loss"] = [a.tolist() for a in data["advantages"].unbind()]
        return loss_function(model_output=model_output, data=data, dp_group=dp_group)

    inner = _weighted_loss(at_verl_loss, row_weights, stats, prefix)

    def loss(model_output, data, dp_group=None):
        record["original"] = [a.tolist() for a in data["advantages"].unbind()]
        record["span"] = [s.tolist() for s in data["verl_bot_grail_span"].unbind()]
        out = inner(model_output=model_output, data=data, dp_group=dp_group)
        with open(os.environ["VB_PROBE_FILE"], "a") as f:
            f.write(json.dumps(record) + "\\n")
        return out

    return loss

efs.weighted_loss = weighted_loss
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tiny models and data the CPU recipes run on, the probe module, and the judge (a real vLLM server)."""
    from verl_bot_demo.tiny_model import build_model

    root = tmp_path_factory.mktemp("recipes_cpu")
    judge_dir = root / "judge_model"
    build_model(judge_dir, seed=1)
    port = free_port()
    log = open(root / "judge.log", "wb")
    judge = subprocess.Popen(
        [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", str(judge_dir), "--host", "127.0.0.1",
         "--port", str(port), "--served-model-name", "judge", "--dtype", "float32", "--enforce-eager",
         "--kv-cache-memory-bytes", str(2**28), "--mamba-ssm-cache-dtype", "float32"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # on this machine with verl-bot installed, as a judge beside a CPU run would be: verl-bot's vLLM plugin
        # then spares its sampler the inductor kernels (verl_bot/hooks/vllm_cpu.py, V3 and V4)
        env={**os.environ, "VERL_PLATFORM": "cpu"},
    )
    try:
        react_data = root / "react_data"
        subprocess.run([PY, str(ROOT / "recipes/data/react.py"), "--out-dir", str(react_data)], check=True,
                       capture_output=True)
        build_model(root / "react_qwen_model", seed=0, warm_start="react", prompts=react_data / "train.parquet",
                    family="qwen2")
        aime_data = root / "aime_data"  # what the recipe makes on the CPU platform (prepare_data)
        subprocess.run([PY, str(ROOT / "recipes/data/aime.py"), "--input", str(ROOT / "recipes/data/aime_cpu.jsonl"),
                        "--out-dir", str(aime_data)], check=True, capture_output=True)
        for family, steps in (("phi3", 800), ("smollm3", 500)):  # the recipe's warm start (prepare_models)
            build_model(root / f"aime_{FAMILIES[family].recipe_tag}_model", seed=0, warm_start="toy_math",
                        prompts=aime_data / "train.parquet", warm_start_kwargs={"steps": steps, "batch_size": 16},
                        family=family)
        (root / "probe").mkdir()
        (root / "probe" / "vb_probe.py").write_text(PROBE)
        wait_http(f"http://127.0.0.1:{port}/v1/models", 300, judge)
        yield {"root": root, "judge": f"http://127.0.0.1:{port}/v1", "judge_pgid": judge.pid}
    finally:
        os.killpg(judge.pid, signal.SIGTERM)
        judge.wait(timeout=60)
        log.close()


class JudgeOutage(threading.Thread):
    """The judge stops answering in the middle of a run and comes back: once the run has logged step 1, every
    process of the judge is stopped (SIGSTOP: connections are accepted, nothing is answered) for `seconds` or until
    the run has logged step 2, whichever comes first, then continued: every judge call of step 2 made while it was
    stopped passed its deadline, and the judge is back before the run's verdict asks the reward server's /health
    (a run that ended inside the outage would have none of its judge counters). The reward server's judge counters
    are read when the judge is back."""

    def __init__(self, setup: dict, seconds: float):
        super().__init__(daemon=True)
        self.pgid, self.seconds = setup["judge_pgid"], seconds
        self.metrics: Path | None = None
        self.reward_url = ""
        self.stopped_at: float | None = None
        self.at_return: dict | None = None
        self._done = threading.Event()

    def attach(self, run: Smoke) -> None:
        """Make this the outage of `run` (started and ended by its `run`)."""
        self.metrics, self.reward_url = run.dir / "metrics.jsonl", f"http://127.0.0.1:{run.env['REWARD_PORT']}"
        run.outage = self

    def _judge_stats(self) -> dict:
        # React's /health also warms its browser and asks the judges: give it time
        with urllib.request.urlopen(self.reward_url + "/health", timeout=120) as resp:
            return json.loads(resp.read()).get("judge_stats", {})

    def _logged(self, step: int) -> bool:
        return self.metrics.exists() and f'"step":{step},' in self.metrics.read_text()

    def run(self) -> None:
        while not self._done.is_set() and not self._logged(1):
            time.sleep(0.2)
        if self._done.is_set():
            return
        os.killpg(self.pgid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        try:
            while not (self._done.is_set() or self._logged(2) or time.monotonic() - self.stopped_at > self.seconds):
                self._done.wait(0.2)
        finally:
            os.killpg(self.pgid, signal.SIGCONT)
        if not self._done.is_set():  # the run goes on: its reward server (stopped with the run) answers
            try:
                self.at_return = self._judge_stats()
            except OSError:  # the run ended meanwhile
                pass

    def end(self) -> None:
        self._done.set()
        self.join(timeout=150)  # a /health read in flight (React's asks the judges: up to 120 s)
        os.killpg(self.pgid, signal.SIGCONT)  # whatever happened, the judge serves the next runs


def answered(stats: dict) -> int:
    """Judge calls the reward server got an answer to (a usable score or not), from its judge counters."""
    return sum(n for key, n in stats.items() if key.endswith(("_ok", "_unparseable")) and "attribution" not in key)


def check_outage(run: Smoke, judge: str, asked_again: bool) -> None:
    """The judge went away during step 2 and came back: step 1 had no `judge_unavailable` verdict, step 2 had
    some (the calls' deadline passed: nothing hung), the run went on to its end, and the verdict's judge line says
    so as a warning, not a failure; `asked_again`: calls made after it came back were answered (the AIME smoke's
    final validation, after OUTAGE_S; the React smoke's step 2 and validation often end first, and its judge,
    shared, answers the AIME smoke's calls after their own outage)."""
    outage = run.outage
    assert outage is not None and outage.stopped_at is not None, "the judge was never stopped"
    steps = run.steps()
    assert steps[1].get("reward/flag/judge_unavailable/mean", 0.0) == 0.0, steps[1]
    assert steps[2]["reward/flag/judge_unavailable/mean"] > 0, steps[2]
    health = run.line("judge")
    found = re.search(r"(\d+) of (\d+) calls answered, \d+ with a usable score, (\d+) unavailable \[WARN\]", health)
    assert found and int(found.group(3)) > 0, health
    if asked_again:
        assert outage.at_return is not None, "the run ended before the judge came back"
        assert int(found.group(1)) > answered(outage.at_return), (health, outage.at_return)
    assert judge in health


class Smoke:
    """One `SMOKE=1 bash recipes/<recipe>.sh` run on the CPU platform; its output folder and what it printed."""

    def __init__(self, setup: dict, recipe: str, algo: str, *overrides: str, launch: str = "", **env: str):
        """`launch` names another launch of the same run (same output folder, a probe folder of its own)."""
        task = recipe.split("_")[0]
        root = setup["root"]
        self.name = f"{recipe}_{algo}"
        self.dir = root / "runs" / self.name
        self.probe_dir = root / "probes" / (self.name + launch)
        self.probe_dir.mkdir(parents=True)
        mark = uuid.uuid4().hex
        judge = {"react": "LLM_JUDGE_BASE_URL", "aime": "STEP_JUDGE_BASE_URL"}[task]
        self.env = {
            **os.environ, "SMOKE": "1", "PLATFORM": "cpu", "ALGO": algo, "PY": PY, MARK_ENV: mark,
            "MODEL_PATH": str(root / f"{recipe}_model"), "OUT_DIR": str(self.dir),
            "DATA_DIR": str(root / f"{task}_data"), "REWARD_PORT": str(free_port()), judge: setup["judge"],
            "VERL_USE_EXTERNAL_MODULES": "vb_probe", "VB_PROBE_DIR": str(self.probe_dir),
            "VB_PROBE_FILE": str(self.probe_dir / "grail.jsonl"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "probe"), os.environ.get("PYTHONPATH")])),
            # the tiny judge never writes a verdict (each reply is flagged unparseable, whatever its length): 16
            # tokens a reply, not the CPU preset's 64, make the same calls and flags for a quarter of its decoding
            "JUDGE_MAX_TOKENS": "16", "RAY_DEDUP_LOGS": "0", **env,
        }
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        self.cmd = ["bash", str(ROOT / "recipes" / f"{recipe}.sh"), *overrides]
        self.mark = mark
        self.setup = setup
        self.outage: JudgeOutage | None = None

    def run(self, timeout: float = 800) -> Smoke:
        """Run the command (with its judge outage, when one is attached) until it exits."""
        start = time.monotonic()
        if self.outage is not None:
            self.outage.start()
        try:
            proc = subprocess.run(self.cmd, env=self.env, capture_output=True, text=True, timeout=timeout,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        finally:
            if self.outage is not None:
                self.outage.end()
            kill_marked(self.mark)
        self.seconds = time.monotonic() - start
        self.rc, self.out, self.err = proc.returncode, proc.stdout, proc.stderr
        return self

    def tail(self, n: int = 6000) -> str:
        return (self.out + self.err)[-n:]

    def verdict(self) -> list[str]:
        lines = self.out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("== verl-bot smoke verdict"))
        return lines[start:]

    def line(self, label: str) -> str:
        return next(line.strip() for line in self.verdict() if line.strip().startswith(label))

    def steps(self) -> dict[int, dict]:
        metrics = [json.loads(ln) for ln in (self.dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
        return {m["step"]: m["data"] for m in metrics if "actor/pg_loss" in m["data"]}

    def probe(self, name: str) -> list[dict]:
        path = self.probe_dir / name
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def check_dense(run: Smoke) -> None:
    """Most recorded responses carry token rewards before their last token (a response whose every reward is 0
    cannot show it)."""
    found = re.match(r"dense token rewards (\d+) of (\d+) recorded", run.line("dense token rewards"))
    dense, n = int(found.group(1)), int(found.group(2))
    assert n >= 8 and dense >= n / 2, run.line("dense token rewards")


def check_verdict(run: Smoke, steps: int = 2) -> None:
    """The smoke's own verdict: OK, verl's vLLM rollout, its steps (2 unless SMOKE_STEPS), the last one saved."""
    assert run.rc == 0, run.tail()
    verdict = "\n".join(run.verdict())
    assert run.verdict()[-1] == "VERDICT: OK", verdict
    assert re.search(r"rollout engine\s+vllm 0\.27\.1 \(CPU build\), verl's vLLM rollout", verdict), verdict
    assert f"steps done          {steps} of {steps} (trainer exit 0)" in verdict
    assert f"global_step_{steps} written" in run.line("checkpoint")
    assert run.line("policy").endswith("[ok]"), run.line("policy")  # neither a mismatch nor stale weights


def check_common(run: Smoke, judge: str | None, steps: int = 2) -> dict[int, dict]:
    """What every smoke run must show: `check_verdict`, every step logged once, synced weights, training."""
    check_verdict(run, steps)
    logged = run.steps()
    assert sorted(logged) == list(range(1, steps + 1))
    for data in logged.values():
        # the rollout's token probabilities are the trainer's after every weight sync, while the actor trains
        assert data["training/rollout_probs_diff_max"] < 1e-3, data["training/rollout_probs_diff_max"]
        assert data["actor/grad_norm"] > 0
        assert data["reward/scorer_failed/mean"] == 0
    if judge is not None:
        calls = re.search(r"(\d+) of (\d+) calls answered", run.line("judge"))
        assert calls and int(calls.group(2)) > 0 and calls.group(1) == calls.group(2), run.line("judge")
    return logged


RESPONSE_CAP = 160  # the CPU platform's MAX_RESPONSE_LENGTH (verl_bot/recipes/settings.py)
_DATE = re.compile(r"Today Date: \d{2} \w+ \d{4}")  # SmolLM3's template stamps the day it renders


def check_family(run: Smoke) -> list[dict]:
    """The recipe's own family reached the rollout: every prompt of step 1's token records is its family's template
    of a train prompt with the recipe's template options (SmolLM3: no-think), as verl decodes it (special tokens
    skipped); every response that ended before the length cap ended with one of the family's EOS tokens (its
    generation_config.json), and most did. Returns the records."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer, GenerationConfig

    from verl_bot.eval.generate import render_prompt

    task, tag = run.name.split("_")[:2]
    family = BY_RECIPE_TAG[tag]
    model = Path(run.env["MODEL_PATH"])
    tokenizer = AutoTokenizer.from_pretrained(model)
    eos = set(GenerationConfig.from_pretrained(model).eos_token_id)
    assert eos == set(tokenizer.convert_tokens_to_ids(list(family.generation_eos)))
    chats = pq.read_table(Path(run.env["DATA_DIR"]) / "train.parquet", columns=["prompt"]).column("prompt").to_pylist()
    expected = {
        _DATE.sub("Today Date: D", tokenizer.decode(tokenizer(render_prompt(tokenizer, chat, dict(
            family.recipe_template_kwargs)), add_special_tokens=False)["input_ids"], skip_special_tokens=True))
        for chat in chats
    }
    records = [json.loads(ln) for ln in (run.dir / "token_records" / "step_1.jsonl").read_text().splitlines() if ln]
    assert len(records) >= 8
    for rec in records:
        assert _DATE.sub("Today Date: D", rec["prompt"]) in expected, rec["prompt"][:400]
    ended = [rec["response_ids"][-1] for rec in records if len(rec["response_ids"]) < RESPONSE_CAP]
    assert len(ended) > len(records) / 2 and set(ended) <= eos, (ended, eos)
    return records


# The judge outages of the React and AIME `bot` smokes: each judge call gives up after JUDGE_DEADLINE_S (no retry:
# the recipes' judges retry twice after 60 s, a stop of minutes), the judge stays stopped for OUTAGE_S at most
JUDGE_DEADLINE_S, OUTAGE_S = "20", 45


@pytest.fixture(scope="module")
def react_bot(setup):
    run = Smoke(setup, "react_qwen", "bot", REACT_REWARD_JUDGE_TIMEOUT_S=JUDGE_DEADLINE_S,
                REACT_REWARD_JUDGE_MAX_RETRIES="0")
    JudgeOutage(setup, OUTAGE_S).attach(run)
    return run.run()


def test_react_qwen_bot_on_verls_vllm_rollout(react_bot):
    """The React recipe's full reward stack on what a warm-started tiny model writes: bundle, lint, render, judge;
    the LLM code judge stops answering during step 2 and comes back (`JudgeOutage`)."""
    steps = check_common(react_bot, judge=None)
    check_family(react_bot)
    assert react_bot.line("local signal").endswith("[ok]")  # ESLint's and the compiler's lines
    # the React smoke asks the judge about the compiled components only (22 calls in a run seen here): step 2's
    # fell inside the outage, and whether the final validation's 4 responses compile is chance
    check_outage(react_bot, "LLM code judge", asked_again=False)
    check_dense(react_bot)
    for data in steps.values():
        for part in ("compile", "eslint", "llm_judge"):
            assert f"reward/{part}/mean" in data, sorted(data)
    assert any(data["reward/solved/mean"] > 0 for data in steps.values())  # some components compiled and rendered
    flags = {k for data in steps.values() for k in data if k.startswith("reward/flag/")}
    assert "reward/flag/judge_unparseable/mean" in flags  # a random judge: a verdict and a flag, never a crash


@pytest.fixture(scope="module")
def aime_bot(setup):
    # the tiny judge's replies are never a verdict (every step "unparseable", no step reward): only answers tell
    # rollouts apart, and the tiny model solves ~1 in 15; 8 groups of 8 give a step mixed groups all but surely
    run = Smoke(setup, "aime_phi", "bot", SMOKE_BATCH="8", ROLLOUT_N="8", MATH_JUDGE_TIMEOUT_S=JUDGE_DEADLINE_S,
                MATH_JUDGE_MAX_RETRIES="0")
    JudgeOutage(setup, OUTAGE_S).attach(run)
    return run.run()


def test_aime_phi_bot_on_verls_vllm_rollout(aime_bot):
    """The AIME recipe on Phi-4-mini-reasoning's family: a tiny LongRoPE Phi (its distinct factors switch within the
    smoke's lengths) that thinks before it answers, trained through the recipe's consistent copy (short factors =
    long ones: rollout and trainer agree); the math server's Eq. 8 with a real step judge, dense rewards into BoT;
    the step judge stops answering during step 2 and comes back (`JudgeOutage`)."""
    steps = check_common(aime_bot, judge=None)
    records = check_family(aime_bot)
    model = json.loads((aime_bot.dir / "model_longrope" / "config.json").read_text())
    assert model["rope_parameters"]["short_factor"] == model["rope_parameters"]["long_factor"]
    assert f"actor_rollout_ref.model.path={aime_bot.dir / 'model_longrope'}" in aime_bot.err
    thinking = [r for r in records if bytes.fromhex("".join(r["token_bytes"])).decode(errors="replace")
                .lstrip().startswith("<think>")]
    assert len(thinking) > len(records) / 2, len(thinking)  # the family's output style: a think block first
    # some rollouts ran to the length cap inside their think block (the warm start makes ~15%): flagged, and no
    # answer credit; the tiny judge gives no verdict, so no step has a local reward S, which the run says itself
    assert max(data.get("reward/flag/think_truncated/mean", 0.0) for data in steps.values()) > 0
    assert all(data["reward/local_signal/mean"] == 0.0 for data in steps.values())
    assert aime_bot.line("local signal").endswith("BoT is GRPO here (no judge verdict, no step or line the scorer "
                                                  "could attribute) [WARN]")
    check_outage(aime_bot, "step judge", asked_again=True)
    check_dense(aime_bot)
    for data in steps.values():
        assert "reward/answer/mean" in data and "reward/format/mean" in data
        assert "bot/adv_abs_max" in data


@pytest.fixture(scope="module")
def aime_vps(setup):
    # the weights the rollout serves at step 2 are the trainer's after step 1's update: keep them (save_freq=1)
    return Smoke(setup, "aime_smollm", "vps", "trainer.save_freq=1").run()


def test_aime_smollm_vps_probes_reach_the_estimator(aime_vps):
    """GRPO-VPS on SmolLM3's family (vLLM runs it through its Transformers backend; a NoPE layer; no-think mode)."""
    check_common(aime_vps, judge=None)
    check_family(aime_vps)
    calls = aime_vps.probe("vps.jsonl")
    assert len(calls) == 2
    alpha = 0.5
    for call in calls:
        rows = call["rows"]
        assert len(rows) == 16  # SMOKE_BATCH 4 prompts x 4 rollouts
        probed = [r for r in rows if r["record"]["status"] == "ok"]
        assert probed and not [r for r in rows if r["record"]["status"] == "probe_failed"], rows
        width = max(r["length"] for r in rows)
        _, expected = reference_vps(
            [[r["grpo"]] * width for r in rows], [r["length"] for r in rows], [r["uid"] for r in rows],
            [r["record"]["cuts"] for r in rows], [r["record"]["logp"] for r in rows],
            [None if r["solved"] is None else float(r["solved"]) for r in rows], alpha, space="prob",
            std_floor=DEFAULT_STD_FLOOR,  # the recipes' (they leave vps_std_floor at its default)
        )
        for r, exp in zip(rows, expected, strict=True):
            assert r["progress"] == pytest.approx(exp[: r["length"]], abs=1e-4)
        # a group of unsolved rollouts whose beliefs stay below 1e-4: the floored z-score keeps its progress within
        # 2e-4 / floor (unfloored, the noise of those beliefs was stretched to unit variance)
        groups = {}
        for r in rows:
            groups.setdefault(r["uid"], []).append(r)
        for group in groups.values():
            if all(r["record"]["status"] == "ok" and r["solved"] == 0 and max(r["record"]["logp"]) < math.log(1e-4)
                   for r in group):
                assert all(abs(p) < 2e-4 / DEFAULT_STD_FLOOR for r in group for p in r["progress"]), group
    for data in aime_vps.steps().values():  # the probing's cost and health reach verl's logged metrics
        assert data["vps/probe_tokens_per_rollout"] > 0 and data["vps/probe_time_s"] > 0
        assert data["vps/probed_rows"] > 0 and data["vps/probe_failed_rows"] == 0


def _trainer_weights(ckpt_actor: Path):
    """The actor's weights in a verl FSDP checkpoint of one rank, loaded into its Hugging Face model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    state = torch.load(ckpt_actor / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt_actor / "huggingface"),
                                             torch_dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)  # tied to the embeddings
    return model.eval()


def test_aime_smollm_vps_probe_logprobs_equal_the_trainers_weights(aime_vps):
    """vLLM's prompt log-probs of step 2's probes (prefix caching on, as the recipes run: probes of one rollout
    share their prompt and prefix) equal a teacher-forced forward of the trainer's weights after step 1's update."""
    import torch

    first, second = sorted(call["time"] for call in aime_vps.probe("vps.jsonl"))
    # step 2's rollout probes: after step 1's estimate, before step 2's (the final validation's use step 2's weights)
    probes = [p for p in aime_vps.probe("probes.jsonl") if first < p["time"] < second]
    assert len(probes) >= 8, len(probes)
    model = _trainer_weights(aime_vps.dir / "ckpt" / "global_step_1" / "actor")
    worst = 0.0
    with torch.no_grad():
        for p in probes:
            ids = torch.tensor([p["ids"]])
            logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
            ours = logp[torch.arange(len(p["ids"]) - 1), ids[0, 1:]]
            entries = p["prompt_logprobs"]
            assert len(entries) == len(p["ids"])
            # verl's layout (extract_prompt_logprobs): entry j is log p(token j + 1), then one dummy entry
            theirs = torch.tensor([entries[j][0] for j in range(len(p["ids"]) - 1)], dtype=torch.float64)
            worst = max(worst, float((ours - theirs).abs().max()))
    assert worst < 1e-3, worst


@pytest.fixture(scope="module")
def aime_grail(setup):
    # GRAIL scores answers only and the tiny model solves ~1 in 15: 8 groups of 8 a step make groups with both
    # outcomes (the only ones with advantages) all but certain, where 4 of 4 leave a step all tied one time in 3.
    # One step; the same command with SMOKE_STEPS=2 then resumes from its checkpoint (aime_grail_resumed)
    return Smoke(setup, "aime_smollm", "grail", SMOKE_BATCH="8", ROLLOUT_N="8", SMOKE_STEPS="1").run()


@pytest.fixture(scope="module")
def aime_grail_resumed(aime_grail):
    return Smoke(aime_grail.setup, "aime_smollm", "grail", launch="_resumed", SMOKE_BATCH="8", ROLLOUT_N="8",
                 SMOKE_STEPS="2", KEEP_CKPTS="1").run()


def test_aime_smollm_grail_weights_reach_verls_loss(aime_grail, aime_grail_resumed):
    """GRAIL's token weights reach verl's ppo_loss (advantages at the loss = advantages x weights) over several
    micro-batches of the recipe's dynamic batching, in step 1 and in step 2 (its resumed launch): w_max on answer
    content, saliency-derived weights before it."""
    check_verdict(aime_grail, steps=1)  # its metrics file is the resumed launch's now
    steps = check_common(aime_grail_resumed, judge=None)
    records = aime_grail.probe("grail.jsonl") + aime_grail_resumed.probe("grail.jsonl")
    assert len(records) >= 4, f"expected several actor micro-batches over 2 steps, got {len(records)}"
    reached, from_saliency = check_grail_records(records)
    assert reached > 0, "no weight != 1 on a token with a non-zero advantage reached the loss"
    assert from_saliency > 0, "no saliency-derived weight (before an answer) reached the loss"
    assert any(rec["stats"]["reweighted_rate"] > 0 for rec in records)
    for data in steps.values():
        check_grail_metrics(data)


def check_grail_records(records: list[dict]) -> tuple[int, int]:
    """Every micro-batch's advantages at verl's loss are the original ones times GRAIL's weights, and answer content
    has w_max; returns (tokens whose weight != 1 met a non-zero advantage, of them saliency-derived)."""
    reached = from_saliency = 0
    for rec in records:
        for w, orig, at_loss, span in zip(rec["weights"], rec["original"], rec["at_loss"], rec["span"], strict=True):
            assert len(w) == len(orig) == len(at_loss) == len(span)
            for wt, a, b in zip(w, orig, at_loss, strict=True):
                assert b == pytest.approx(a * wt, rel=1e-6, abs=1e-7)
            reached += sum(1 for wt, a in zip(w, orig, strict=True) if wt != 1.0 and a != 0.0)
            # tokens before the answer of a reweighted rollout: clip(1 + 0.5 z, 0.5, w_max) from the saliency
            from_saliency += sum(1 for wt, code, a in zip(w, span, orig, strict=True)
                                 if code == 0 and wt not in (1.0, W_MAX) and a != 0)
            assert all(wt == W_MAX for wt, code in zip(w, span, strict=True) if code == 2)  # answer content
    return reached, from_saliency


def check_grail_metrics(data: dict) -> None:
    assert data["grail/w_mean"] > 0 and 0 < data["grail/answer_rate"] <= 1 and math.isfinite(data["grail/w_mean"])
    assert 0 <= data["grail/w_max_share"] <= 1 and data["grail/span_s"] >= 0
    assert 0 < data["grail/saliency_s"] < data["timing_s/update_actor"]
    assert not any(key.startswith("actor/grail/") for key in data)


def test_aime_smollm_grail_resumes_from_its_checkpoint_with_its_weights_at_the_loss(aime_grail_resumed):
    """A GRAIL run resumed (`SMOKE_STEPS=2`, the same command after a 1-step smoke): verl restores the step-1
    checkpoint, the metrics of step 1 are kept, and step 2 runs with GRAIL's hooks in the new processes (its
    weights at verl's loss)."""
    run = aime_grail_resumed
    assert "Resuming from" in run.out + run.err and "global_step_1" in run.out + run.err, run.tail()
    lines = [json.loads(ln) for ln in (run.dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    assert [m["step"] for m in lines if "actor/pg_loss" in m["data"]] == [1, 2]  # each step once
    records = run.probe("grail.jsonl")  # this launch's: step 2's micro-batches
    assert records, "GRAIL's loss wrapper did not run in the resumed trainer"
    check_grail_records(records)
    # retention through verl's trainer: the resumed launch keeps KEEP_CKPTS=1 checkpoint, and the one of the first
    # launch goes too (verl 0.9.1 counts only its own process's saves: verl_bot/hooks/checkpoint_retention.py)
    assert "'max_actor_ckpt_to_keep': 1" in run.out + run.err, run.tail()
    assert sorted(p.name for p in (run.dir / "ckpt").glob("global_step_*")) == ["global_step_2"]
