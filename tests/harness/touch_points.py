"""The touch-point command (`python -m verl_bot.hooks.touch_points --json`) run in a process of its own."""

import json
import subprocess
import sys


def json_report(env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m verl_bot.hooks.touch_points --json` in `env`: the process and its report (the JSON after what
    verl's imports print)."""
    proc = subprocess.run([sys.executable, "-m", "verl_bot.hooks.touch_points", "--json"], capture_output=True,
                          text=True, timeout=300, env=env)
    return proc, json.loads(proc.stdout[proc.stdout.index("{\n"):]) if "{\n" in proc.stdout else {}
