"""verl-bot as docs/verl_setup.md installs it: a wheel built from a clone, installed (not editable) beside an
existing verl.

One wheel is built (module fixture) from a copy of this checkout with what `make setup` leaves in a clone
(reward_servers/react/node_modules, __pycache__ folders, verl_bot.egg-info), by pip as docs/verl_setup.md says
(`pip wheel --no-deps -w dist .`; here without build isolation, so that no setuptools is downloaded). It goes with
`pip install --no-deps` into a fresh venv that sees this machine's verl and its dependencies: the .venv's
site-packages through a folder of links to each of its entries, less those of the editable verl-bot that `make setup`
installs there (its .pth, finder and dist-info), added by a .pth file. Every command runs from a folder outside the
repository, without PYTHONPATH. Then:

- the wheel holds the source files of its packages and nothing else (no node_modules, __pycache__ or tests/);
- `import verl_bot` in the new environment is the installed copy, not this checkout;
- verl's trainer runs one step with the two overrides (hf rollout, the CPU overrides) and uses verl-bot;
- the React server starts from the installed package, its Node dependencies installed by
  `python -m reward_servers.react.node_deps` into the user's cache (outside site-packages), and scores a component.

    .venv/bin/python -m pytest -q tests/e2e/test_wheel.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, wait_http
from tests.harness.servers import kill
from tests.harness.trainer import Run

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[2]
# the wheel's top-level packages
PACKAGES = ("verl_bot", "verl_bot_vllm", "verl_bot_contract", "verl_bot_demo", "reward_servers")
COMPONENT = "```tsx\nexport default function App() { return <h1>Hi</h1>; }\n```"
BROKEN = "```tsx\nexport default function App() { return <h1>Hi</h1>;\n```"  # no closing brace


def sources() -> list[str]:
    """The repository's files (tracked, or new and not ignored) under PACKAGES, less their READMEs."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PACKAGES],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted(f for f in set(out.splitlines()) if (ROOT / f).is_file() and Path(f).name != "README.md")


def packages(files: list[str]) -> set[str]:
    """The Python packages among `files`: the folders with an __init__.py."""
    return {str(Path(f).parent).replace("/", ".") for f in files if Path(f).name == "__init__.py"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """verl-bot's wheel, built by pip from a copy of this checkout that holds what `make setup` leaves in a clone."""
    modules = ROOT / "reward_servers" / "react" / "node_modules"
    assert modules.is_dir(), "run `make setup` first (the React server's node_modules is the leftover checked)"
    src = tmp_path_factory.mktemp("clone") / "verl-bot"
    shutil.copytree(ROOT, src, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".venv", "outputs", "build", "node_modules"))
    (src / "reward_servers" / "react" / "node_modules").symlink_to(modules, target_is_directory=True)
    dist = src / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    "."], cwd=src, check=True, capture_output=True)
    (built,) = dist.glob("verl_bot-*.whl")
    return built


@dataclass
class Env:
    """A venv with the wheel installed, beside this machine's verl."""

    python: Path
    purelib: Path  # its own site-packages, where the wheel went

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        """`base` for a command of this environment: its bin/ first on PATH, no PYTHONPATH, no verl_bot probe."""
        env = {k: v for k, v in base.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "VERL_USE_EXTERNAL_MODULES")}
        env["PATH"] = os.pathsep.join([str(self.python.parent), base.get("PATH", "")])
        return env

    def run(self, code: str, cwd: Path, **env: str) -> str:
        """The output of `python -c code` in this environment."""
        out = subprocess.run([str(self.python), "-c", code], cwd=cwd, env=self.environ({**os.environ, **env}),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-4000:]
        return out.stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory, wheel) -> Env:
    """A fresh venv that sees the .venv's packages except the editable verl-bot, with the wheel pip-installed."""
    root = tmp_path_factory.mktemp("env")
    site = Path(sysconfig.get_paths()["purelib"])  # the .venv's site-packages
    (editable,) = [d for d in importlib.metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "verl-bot"]
    own = {Path(str(f)).parts[0] for f in editable.files}  # its .pth, finder and dist-info
    assert any(name.endswith(".pth") for name in own), f"not an editable install: {sorted(own)}"
    view = root / "verl_site"
    view.mkdir()
    for entry in site.iterdir():
        if entry.name not in own:
            (view / entry.name).symlink_to(entry)
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "verl_site.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    made = Env(python, purelib)
    out = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], cwd=root,
                         env=made.environ(dict(os.environ)), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return made


# -------------------------------------------------------------------------------------------------- tests
def test_the_wheel_holds_the_source_files_of_its_packages_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if not n.split("/")[0].endswith(".dist-info"))
    leftovers = [n for n in shipped if {"node_modules", "__pycache__", "tests"} & set(n.split("/"))]
    assert not leftovers, leftovers[:20]
    expected = sources()
    assert not set(expected) - set(shipped), sorted(set(expected) - set(shipped))
    assert not set(shipped) - set(expected), sorted(set(shipped) - set(expected))
    assert packages(shipped) == packages(expected)
    assert {"verl_bot.credit", "verl_bot.launch", "verl_bot.observe", "verl_bot.vps", "verl_bot.hooks.v1",
            "verl_bot.hooks.legacy", "verl_bot_contract"} <= packages(shipped)
    for data in ("reward_servers/react/node/worker.mjs", "reward_servers/react/package-lock.json",
                 "reward_servers/react/setup.sh", "verl_bot/cpu/overrides.txt"):  # what the servers and CPU runs read
        assert data in shipped
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "verl_bot = verl_bot.verl_entry" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_verl_bot_imports_from_the_installed_wheel_beside_the_existing_verl(env, tmp_path):
    found = json.loads(env.run(
        "import importlib.metadata as m, json, verl, verl_bot, reward_servers.react.worker as w\n"
        "d = m.distribution('verl-bot')\n"
        "ours = [x.metadata['Name'] for x in m.distributions() if x.metadata['Name'] == 'verl-bot']\n"
        "print(json.dumps({'verl_bot': verl_bot.__file__, 'server': w.__file__, 'verl': verl.__file__, 'dists': ours,\n"
        "                  'direct_url': json.loads(d.read_text('direct_url.json'))}))", tmp_path))
    for key in ("verl_bot", "server"):
        assert Path(found[key]).is_relative_to(env.purelib), found
    assert not Path(found["verl"]).is_relative_to(env.purelib) and "verl_site" in found["verl"], found
    assert found["dists"] == ["verl-bot"], found  # the editable one is out of sight
    assert "archive_info" in found["direct_url"] and "dir_info" not in found["direct_url"], found  # a wheel, not -e


def test_verl_trains_one_step_with_the_two_overrides_of_the_readme(env, workdir):
    run = Run(workdir, "wheel_bot", ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"], steps=1)
    run.cmd[0] = str(env.python)
    run.env = env.environ(run.env)
    assert not run.dir.is_relative_to(ROOT)
    run.finish(timeout=420)
    log = run.output()
    assert "verl-bot 0.1.0 is in use in this run" in log, log[-4000:]
    assert str(ROOT / "verl_bot") not in log
    steps = {m["step"]: m["data"] for m in map(json.loads, run.metrics.read_text().splitlines())}
    assert list(steps) == [1], steps.keys()
    for key in ("actor/pg_loss", "reward/score/mean", "bot/adv_abs_max"):
        assert key in steps[1], sorted(steps[1])


def test_the_react_server_runs_from_the_installed_wheel_with_its_node_dependencies_in_the_user_cache(env, tmp_path):
    cache = tmp_path / "cache"
    environ = env.environ({**os.environ, "XDG_CACHE_HOME": str(cache), "npm_config_prefer_offline": "true"})
    environ.pop("REACT_REWARD_NODE_DIR", None)
    setup = subprocess.run([str(env.python), "-m", "reward_servers.react.node_deps"], cwd=tmp_path, env=environ,
                           capture_output=True, text=True, timeout=600)
    assert setup.returncode == 0, setup.stderr[-4000:]
    node_dir = cache / "verl-bot" / "react"
    assert (node_dir / "node_modules" / "esbuild").is_dir(), setup.stderr[-2000:]
    assert not list(env.purelib.glob("reward_servers/**/node_modules"))
    port = free_port()
    server = subprocess.Popen([str(env.python), "-m", "reward_servers.react", "--port", str(port),
                               "--compile-workers", "1"], cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 180, server, poll_s=0.3)
        items = [{"id": "ok", "prompt": "A heading", "response": COMPONENT},
                 {"id": "broken", "prompt": "A heading", "response": BROKEN}]
        body = {"items": items, "options": {"llm_judge": False, "vlm_judge": False}}
        reply = httpx.post(f"http://127.0.0.1:{port}/score", json=body, timeout=180)
    finally:
        kill(server)
    assert reply.status_code == 200, reply.text
    out = {item["id"]: item for item in reply.json()["items"]}
    assert out["ok"]["info"]["compiled"] is True and out["ok"]["global"]["parts"]["compile"] == 0.0, out["ok"]
    assert out["broken"]["info"]["compiled"] is False and out["broken"]["global"]["parts"]["compile"] == -1.0, out
