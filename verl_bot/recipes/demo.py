"""The README's main job (`make demo`, `bash recipes/cpu_demo.sh`, docs/cpu_demo.md): BoT-GRPO against GRPO through
verl's real PPO trainer on this CPU, each run `recipes/cpu_train.sh` on toy_lint behind the quiet console
(`verl_bot_demo.console`), then the report (reward over steps as PNG, the token credit of the last step as HTML).

Its settings are environment variables (`ALGOS`, `STEPS`, `SEED`, `W_LOCAL`, `MODEL_DIR`, `DEMO_DIR`, `LOG`,
`REPORT_STEPS`, `REPORT_GROUPS`, `VERBOSE`); extra Hydra overrides go to both runs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from verl_bot.recipes.env import ROOT, Env
from verl_bot.recipes.supervise import Stopped, Supervisor

DESCRIPTIONS = {"bot": "BoT-GRPO, dense token rewards r_t = G + {w} * S_t",
                "grpo": "verl's GRPO on the global score G only", "pure": "PURE on the reward streams"}


def run_commands(env: Env, user: list[str]) -> list[tuple[str, dict[str, str], list[str]]]:
    """(ALGO, its variables, its command) of each run: the console around `recipes/cpu_train.sh`."""
    demo = Path(env.get("DEMO_DIR", ROOT / "outputs" / "cpu_demo"))
    steps, seed, w_local = env.get("STEPS", 20), env.get("SEED", 0), env.get("W_LOCAL", "0.5")
    shared = {"STEPS": steps, "SEED": seed, "W_LOCAL": w_local,
              "MODEL_DIR": env.get("MODEL_DIR", ROOT / "outputs" / f"tiny_model_s{seed}")}
    algos = env.get("ALGOS", "bot grpo").split()
    report = [f"+algorithm.token_report_steps=[{env.get('REPORT_STEPS', '1,-1')}]",  # -1: the last step
              f"+algorithm.token_report_groups={env.get('REPORT_GROUPS', 4)}"]  # prompts recorded a step
    verbose = ["--verbose"] if env.flag("VERBOSE") else []
    out = []
    for i, algo in enumerate(algos):
        title = f"[{i + 1}/{len(algos)}] {algo}: {DESCRIPTIONS.get(algo, '{algo}').format(w=w_local, algo=algo)}"
        out.append((algo, {**shared, "ALGO": algo, "OUT_DIR": str(demo / algo)}, [
            env.get("PY", ROOT / ".venv" / "bin" / "python"), "-m", "verl_bot_demo.console", *verbose,
            "--log", log_path(env), "--metrics", str(demo / algo / "metrics.jsonl"), "--steps", steps,
            "--title", title, "--", "bash", str(ROOT / "recipes" / "cpu_train.sh"), *report,
            f"+algorithm.token_report_dir={demo / algo / 'token_records'}", *user,
        ]))
    return out


def log_path(env: Env) -> str:
    return env.get("LOG", Path(env.get("DEMO_DIR", ROOT / "outputs" / "cpu_demo")) / "demo.log")


def main(environ: Mapping[str, str], user: list[str]) -> int:
    """The demo's runs, one after the other (the first that fails ends it with its code), then the report."""
    env = Env(environ)
    demo, log = Path(env.get("DEMO_DIR", ROOT / "outputs" / "cpu_demo")), Path(log_path(env))
    demo.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    runs = run_commands(env, user)
    print(f"verl-bot CPU demo: {' vs '.join(a for a, _, _ in runs)} on toy_lint, {env.get('STEPS', 20)} steps each "
          f"(seed {env.get('SEED', 0)}), verl's real trainer")
    print(f"full output: {log}{'' if env.flag('VERBOSE') else ' (VERBOSE=1 shows it here)'}", flush=True)
    try:
        with Supervisor() as sup:  # a stop reaches the console, which stops the trainer
            for _, variables, argv in runs:
                if rc := sup.run(argv, env={**environ, **variables}):
                    return rc
    except Stopped as stop:
        return stop.code
    report = [env.get("PY", ROOT / ".venv" / "bin" / "python"), "-m", "verl_bot.eval.training_report",
              *(x for algo, _, _ in runs for x in ("--run", f"{algo}={demo / algo}")),
              "--groups", env.get("REPORT_GROUPS", 4), "--out", str(demo / "report")]
    with log.open("a") as err:
        return subprocess.run(report, stderr=err).returncode
