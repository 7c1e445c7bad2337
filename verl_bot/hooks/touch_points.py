"""Every touch point of verl-bot with the installed verl, checked without changing verl.

    python -m verl_bot.hooks.touch_points [--path v1|legacy] [--json]

For each trainer path it imports the verl modules of the path's installations in `verl_bot.hooks.PLAN` and runs
each dry (`verl_bot.hooks.compat.collecting`): one line per touch point says found, changed, missing or "not checked"
(a module that does not import here); the exit status is 1 when anything is changed or missing. A verl-bot run's
driver checks its own trainer path the same way before Ray (`require`, called by `verl_bot.hooks.validate_config`).
After a verl upgrade: docs/verl_versions.md, section What moved in a verl: one command.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable

from verl_bot.errors import VerlBotConfigError
from verl_bot.hooks import INSTALLED, TRAINER_PATHS, VLLM_ROLLOUT, run_step, steps_for
from verl_bot.hooks.compat import SUPPORTED_VERL, Finding, collecting, unsupported_message
from verl_bot.hooks.transaction import LEDGER, first_line

PROBLEMS = ("changed", "missing")
USE_V1 = {"v1": "trainer.use_v1=true", "legacy": "trainer.use_v1=false"}
COMMAND = "python -m verl_bot.hooks.touch_points"


def import_finding(module: str) -> Finding | None:
    """Import the verl module `module`; None when it imports, else why not (missing: verl has no such module)."""
    import verl

    try:
        importlib.import_module(module)
        return None
    except Exception as exc:  # noqa: BLE001 - a module that fails to import for its own reasons is not verl-bot's
        name = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if name and (name == "verl" or name.startswith("verl.")):  # this module, or one of verl's it needs
            by = "" if (module + ".").startswith(name + ".") else f" (imported by {module})"
            return Finding(module, "missing", f"verl {verl.__version__} has no module {name}{by}")
        return Finding(module, "not checked", f"{module} does not import here: {type(exc).__name__}: "
                                              f"{first_line(exc)}")


def check_step(step: str) -> list[Finding]:
    """The findings of one step of `PLAN` run dry (its module imported); an error the step's own lookups do not
    name (an attribute gone, a type changed) is a finding "changed" of the step."""
    with collecting() as findings:
        try:
            run_step(step)
        except AttributeError as exc:
            findings.append(Finding(step, "missing", f"{step}: {first_line(exc)}"))
        except Exception as exc:  # noqa: BLE001 - whatever breaks is what a verl upgrade changed
            findings.append(Finding(step, "changed", f"{step}: {type(exc).__name__}: {first_line(exc)}"))
    return findings


def check(path: str, wanted: Callable[[str], bool] = lambda module: True,
          skip: frozenset[str] = frozenset()) -> list[Finding]:
    """The findings of every step of trainer path `path` whose verl module is `wanted` and that is not in `skip`,
    one per touch point, in `PLAN`'s order."""
    findings: dict[str, Finding] = {}
    for module, step in steps_for(path):
        if not wanted(module) or step in skip:
            continue
        problem = import_finding(module)
        for finding in [problem] if problem is not None else check_step(step):
            findings.setdefault(finding.label, finding)
    return list(findings.values())


def run_modules(config) -> Callable[[str], bool]:
    """The verl modules of `PLAN` a run imports somewhere: vLLM's rollout only when the run's rollout is vLLM."""
    rollout = str(config.actor_rollout_ref.rollout.get("name", ""))
    return lambda module: rollout == "vllm" or not module.startswith(VLLM_ROLLOUT)


def require(config, path: str) -> None:
    """Stop a verl-bot run before Ray (`VerlBotConfigError`, one line) when a touch point of its trainer path `path`
    is changed or missing in the installed verl, or verl-bot went off in this process (`LEDGER.failure`)."""
    import verl

    # a step installed in this process checked its targets then (and a user's own wrapper may stand over verl-bot's
    # since): only the others are checked here, all of them once verl-bot is off (everything was undone)
    installed = frozenset(INSTALLED) if LEDGER.failure is None else frozenset()
    problems = [f for f in check(path, run_modules(config), skip=installed) if f.status in PROBLEMS]
    if problems:
        listed = "; ".join(f"{f.label} {f.status} ({f.detail})" for f in problems)
        what = f"on the {path} trainer path ({USE_V1[path]}) {listed}; `{COMMAND}` lists every touch point"
        raise VerlBotConfigError(unsupported_message(verl.__version__, what))
    if LEDGER.failure is not None:
        raise VerlBotConfigError(f"verl-bot is off in this process: {LEDGER.failure}")


def report(paths: tuple[str, ...]) -> dict[str, list[Finding]]:
    """{path: its findings} for each trainer path in `paths`."""
    return {path: check(path) for path in paths}


def render(verl_version: str, found: dict[str, list[Finding]]) -> str:
    """The report as text: a header per trainer path with its counts, then one line per touch point."""
    lines = [f"verl {verl_version}; verl-bot supports verl{SUPPORTED_VERL}"]
    for path, findings in found.items():
        counts = {status: sum(f.status == status for f in findings)
                  for status in ("found", *PROBLEMS, "not checked")}
        lines.append(f"\n{path} trainer path ({USE_V1[path]}): " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        width = max((len(f.label) for f in findings), default=0)
        lines += [f"  {f.status:<11} {f.label:<{width}}  {'' if f.status == 'found' else f.detail}".rstrip()
                  for f in findings]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=TRAINER_PATHS, action="append", help="a trainer path (default: both)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    import verl

    found = report(tuple(args.path or TRAINER_PATHS))
    if args.json:
        print(json.dumps({"verl": verl.__version__, "supported": SUPPORTED_VERL,
                          "paths": {p: [vars(f) for f in fs] for p, fs in found.items()}}, indent=1))
    else:
        print(render(verl.__version__, found))
    return int(any(f.status in PROBLEMS for fs in found.values() for f in fs))


if __name__ == "__main__":
    sys.exit(main())
