"""The quiet console of the CPU demo (verl_bot_demo/console.py) and the light command-line tools.

The console runs a real command (a small bash script standing in for the trainer: it writes verl's
file-logger lines and the output lines the real trainer prints, taken from a demo log) and is checked
for what reaches the terminal, what reaches the log, and the exit code.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl_bot_demo import console

ROOT = Path(__file__).resolve().parents[2]

# lines as the real demo's trainer printed them (Ray's colour codes included)
HARMLESS_LINES = [
    "\x1b[36m(pid=18183)\x1b[0m /x/verl/workers/engine/__init__.py:32: UserWarning: torchtitan engine is not "
    "available: ModuleNotFoundError(\"No module named 'torchtitan'\")",
    '\x1b[36m(pid=18183)\x1b[0m   warnings.warn(f"torchtitan engine is not available: {e!r}", stacklevel=1)',
    "\x1b[36m(AgentLoopWorkerTQ pid=1)\x1b[0m WARNING:2026-11-30 12:20:30,100:target_num_threads 8 should not exceed "
    "total physical CPU cores 2. Setting to 2.",
    "/x/verl/trainer/main_ppo.py:180: UserWarning: Disabled critic as algorithm.adv_estimator != gae. If it is not "
    "intended, please set critic.enable=True",
    "  use_critic=need_critic(config),",
    "2026-11-30 12:19:07,444\tWARNING authentication_token_setup.py:85 -- Token authentication is enabled for this "
    "Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.",
    "\x1b[36m(WorkerDict pid=19146)\x1b[0m Warning: Failed to set NUMA affinity: libnuma.so: cannot open shared "
    "object file: No such file or directory",
    "(TaskRunnerV1 pid=1) /x/torchdata/stateful_dataloader/stateful_dataloader.py:379: UserWarning: 'set_vital' is "
    "deprecated, please do not call",
    '(TaskRunnerV1 pid=1)   torch.set_vital("Dataloader", "enabled", "True")  # type: ignore[attr-defined]',
    # verl's vLLM rollout on vLLM's CPU build
    "(vLLMHttpServer pid=6332) WARNING 12-01 09:00:00 [vllm.py:609] Model Runner V2 requires Triton; using the V1 "
    "model runner instead.",
    "(WorkerDict pid=6239) WARNING 12-01 08:59:35 [importing.py:65] Triton is installed, but doesn't include CPU "
    "backend. Disabling Triton.",
    "(vLLMHttpServer pid=6332) WARNING 12-01 09:00:00 [vllm.py:1194] Enforce eager set, disabling torch.compile and "
    "CUDAGraphs. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none",
    "(vLLMHttpServer pid=6332) WARNING 12-01 09:00:00 [vllm.py:1247] Inductor compilation was disabled by user "
    "settings, optimizations settings that are only active during inductor compilation will be ignored.",
    "(vLLMHttpServer pid=6332) (Worker pid=6426) WARNING 12-01 09:00:31 [cpu_worker.py:127] libtcmalloc is not found "
    "in LD_PRELOAD. For best performance, please follow the section `set LD_PRELOAD`",
    "(vLLMHttpServer pid=6332) [W1201 09:00:31.653936507 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy "
    "for memory allocation on the NUMA nodes (0).",
    "(WorkerDict pid=6239) WARNING:2026-12-01 08:59:37,716:IPC is not supported on your devices. Falling back to "
    "shared memory for weight transfer, which may cause performance degradation.",
    "(vLLMHttpServer pid=6332) WARNING 12-01 09:00:32 [api_router.py:30] LoRA dynamic loading & unloading is enabled "
    "in the API server. This should ONLY be used for local development!",
    "(vLLMHttpServer pid=6332) WARNING 12-01 09:00:32 [model.py:1637] Default vLLM sampling parameters have been "
    "overridden by the model's `generation_config.json`: `{'temperature': 1.0}`.",
    "(vLLMHttpServer pid=6332) WARNING 12-01 09:00:57 [input_processor.py:291] Passing raw prompts to InputProcessor "
    "is deprecated and will be removed in v0.18.",
    "(TaskRunnerV1 pid=6082) WARNING:2026-12-01 09:00:01,000:Setting TOKENIZERS_PARALLELISM=false for forked "
    "processes.",
]


@pytest.mark.parametrize("line", HARMLESS_LINES)
def test_known_harmless_lines(line):
    assert console.known_harmless(line) is not None
    assert not console.warning_like(line)


@pytest.mark.parametrize(
    ("line", "warning"),
    [
        ("(TaskRunnerV1 pid=1) WARNING:2026-11-30:something new happened", True),
        ("/x/y.py:3: FutureWarning: this will change", True),
        ("(TaskRunnerV1 pid=1) Traceback (most recent call last):", True),
        ("(TaskRunnerV1 pid=1)           'truncation': 'error',", False),  # verl's config dump
        ("ray init kwargs: {'NCCL_DEBUG': 'WARN', 'VLLM_LOGGING_LEVEL': 'WARN'}", False),
        ("(TaskRunnerV1 pid=1) step:1 - actor/pg_loss:0.1", False),
    ],
)
def test_warning_like(line, warning):
    assert console.warning_like(line) is warning


def test_step_line_by_hand():
    assert console.clock(65) == "1:05" and console.clock(3725) == "1:02:05"
    assert console.bar(5, 20) == "[#####---------------]" and console.bar(20, 20) == "[" + "#" * 20 + "]"
    data = {"reward/score/mean": 0.6724, "reward/acc/mean": 0.03125, "timing_s/step": 6.06}
    line = console.step_line(3, 20, data, [6.0, 6.2, 5.8])
    assert line == "  step  3/20 [###-----------------]  G +0.672  solved 0.031  6.1 s/step  ETA 1:42"
    assert console.step_line(20, 20, {}, [6.0]) == "  step 20/20 [####################]  G -  solved -"


FAKE_TRAINER = r"""
m="$1"; shift
echo "+ set -x trace of the recipe"
for line in "$@"; do echo "$line"; done
for s in 1 2; do
    data="\"reward/score/mean\": 0.$s, \"reward/acc/mean\": 0.5, \"timing_s/step\": 2.0"
    echo "{\"step\": $s, \"data\": {$data}}" >> "$m"
    sleep 0.6
done
echo "(TaskRunnerV1 pid=1) WARNING: an unknown warning"
echo "verl-bot: run stopped: VerlBotConfigError: the reason" >&2
exit "${RC:-0}"
"""


def _console(tmp_path, monkeypatch, rc: int, *flags: str) -> tuple[int, str, str]:
    script = tmp_path / "fake_trainer.sh"
    script.write_text(FAKE_TRAINER)
    metrics, log = tmp_path / "metrics.jsonl", tmp_path / "demo.log"
    metrics.write_text('{"step": 7, "data": {"timing_s/step": 1.0}}\n')  # a previous run's: must not count
    args = console.build_parser().parse_args(
        ["--log", str(log), "--metrics", str(metrics), "--steps", "2", "--title", "[1/1] fake", *flags, "--",
         "bash", str(script), str(metrics), *HARMLESS_LINES]
    )
    out = io.StringIO()
    monkeypatch.setenv("RC", str(rc))
    code = console.Console(args, out=out).run(args.command[1:])
    return code, out.getvalue(), log.read_text()


def test_console_shows_steps_and_keeps_verl_in_the_log(tmp_path, monkeypatch):
    code, shown, log = _console(tmp_path, monkeypatch, 0)
    lines = shown.splitlines()
    assert code == 0
    assert lines[0] == "[1/1] fake"
    assert lines[1] == "  step 1/2 [##########----------]  G +0.100  solved 0.500  2.0 s/step  ETA 0:02"
    assert lines[2] == "  step 2/2 [####################]  G +0.200  solved 0.500  2.0 s/step"
    assert lines[3].startswith("  done: 2 steps in ")
    assert lines[4] == f"  1 warning line(s) not known to be harmless: see {tmp_path / 'demo.log'}"
    assert len(lines) == 5 and "WARN" not in shown.replace("warning line(s)", "")
    for line in HARMLESS_LINES:  # every line of the command is in the log, unchanged
        assert line in log
    assert "+ set -x trace of the recipe" in log and "an unknown warning" in log
    assert "lines kept out of the terminal as known-harmless" in log
    assert "    2 x /engine is not available" in log  # counted, with its reason next to it


def test_console_failure_shows_the_last_lines_without_the_harmless_ones(tmp_path, monkeypatch):
    code, shown, _ = _console(tmp_path, monkeypatch, 3)
    assert code == 3
    assert "  FAILED (exit code 3) after " in shown
    assert "    verl-bot: run stopped: VerlBotConfigError: the reason" in shown
    assert "    (TaskRunnerV1 pid=1) WARNING: an unknown warning" in shown
    assert not any(console.known_harmless(line) is not None for line in shown.splitlines())
    assert f"  full output: {tmp_path / 'demo.log'}" in shown


def test_console_verbose_copies_everything(tmp_path, monkeypatch):
    code, shown, _ = _console(tmp_path, monkeypatch, 0, "--verbose")
    assert code == 0
    assert all(line in shown for line in HARMLESS_LINES)


@pytest.mark.parametrize("module", ["verl_bot.eval", "verl_bot_demo.console"])
def test_light_commands_print_their_help_without_importing_verl(module):
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.startswith(f"usage: python -m {module}"), out.stderr[-2000:]
    imported = [ln.rsplit("|", 1)[-1].strip() for ln in out.stderr.splitlines() if ln.startswith("import time:")]
    heavy = [m for m in imported if m.split(".")[0] in ("verl", "torch", "ray", "transformers")]
    assert not heavy, heavy[:10]
    assert [ln for ln in out.stderr.splitlines() if not ln.startswith("import time:")] == []  # no warning at all


def test_other_entry_points_still_import_verl_first():
    code = "import verl_bot, sys; print('verl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_reaches_the_trainer_under_timeout(tmp_path, signum):
    """The recipe runs the trainer under `timeout`, out of the terminal's reach: Ctrl-C on the console must get
    to it (SIGINT, on which verl's trainer shuts Ray down), and the console exits with the trainer's code. A
    SIGTERM of the console (`kill`, a scheduler, recipes/cpu_demo.sh stopped) does the same."""
    got = tmp_path / "got_sigint"
    trainer = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(got)!r}, 'w').write('SIGINT')\n"
        "    sys.exit(130)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "print('fake trainer', 'ready'.upper(), flush=True)\n"
        "time.sleep(120)\n"
    )
    script = tmp_path / "recipe.sh"
    script.write_text(f'timeout 300 {sys.executable} -c "$1" verl.trainer.main_ppo\nexit $?\n')
    log = tmp_path / "demo.log"
    cmd = [sys.executable, "-m", "verl_bot_demo.console", "--log", str(log), "--metrics", str(tmp_path / "m.jsonl")]
    console_proc = subprocess.Popen(
        [*cmd, "--steps", "2", "--", "bash", str(script), trainer], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while "fake trainer READY" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and console_proc.poll() is None, "the fake trainer did not start"
            time.sleep(0.2)
        console_proc.send_signal(signum)
        out, _ = console_proc.communicate(timeout=60)
    finally:
        console_proc.kill()
    assert got.read_text() == "SIGINT"
    assert console_proc.returncode == 130, out
    assert "interrupted: stopping the trainer" in out
