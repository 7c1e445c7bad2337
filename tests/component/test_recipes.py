"""The paper's recipes (`bash recipes/{react,aime}_*.sh`, composed in verl_bot/recipes/): every recipe x ALGO
composes into a config that verl accepts, with the values the paper (or our documented choice) asks for; the CPU run
(recipes/cpu_train.sh) sets each ALGO as they do; every pre-launch check and node-plan refusal is one line before
anything starts.

How: each recipe runs in this process as `bash recipes/X.sh` runs it (`verl_bot.recipes.launch.main` with the
environment and arguments the shell passes), and its `DRY_RUN=args` command line is composed by Hydra exactly as
`python -m verl.trainer.main_ppo` composes it (nothing here repeats the recipe's overrides). The AIME recipes run as
on a fresh checkout, without their data (a dry run needs no data, server, judge or GPU). Hydra's struct mode fails a
mistyped key; verl's own `validate_config` (what `main_ppo` runs first) fails a bad value. The node is a fake
`nvidia-smi`'s (tests/fake_gpus.py: 8 idle 80 GB GPUs unless a test says otherwise), whatever this machine has. The
slower checks run through the shell entry points in a pool of two processes, started first: one real `DRY_RUN=1`
(verl's `--cfg job`, whose YAML must equal the composed config) and the README's two single-node commands as typed
through the whole launch path (fake `nvidia-smi` and `vllm serve`, `--cfg job` instead of training): the judge started
on its GPUs, the React server started, checked and stopped, the trainer on the others. What a stop does to the
processes a recipe starts: tests/component/test_recipe_supervision.py; the command lines against the bash recipes'
own: tests/unit/test_recipe_lines.py.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests import fake_gpus
from tests.conftest import compose_verl_config, free_port
from tests.harness.recipes import (  # noqa: F401 - recipe_data, recipe_node: the fixtures `data` and `node`
    base_env,
    cpu_train_args,
    data_env,
    dry_run_args,
    last_line,
    recipe_data,
    recipe_node,
    run_recipe,
)
from verl_bot.launch import node_plan
from verl_bot.launch.families import BY_RECIPE_TAG
from verl_bot.observe import token_records
from verl_bot.recipes import cpu_train
from verl_bot.recipes.tables import RECIPES as TABLE

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ["react_qwen", "react_smollm", "react_phi", "aime_qwen", "aime_smollm", "aime_phi"]
ALGOS = ["bot", "grpo", "gspo", "dapo", "pure", "pass", "reco"]
MODELS = {tag: family.base_model for tag, family in BY_RECIPE_TAG.items()}  # verl_bot/launch/families.py: one place


def recipe_args(node, name: str, data: dict, **env: str) -> list[str]:
    return dry_run_args(node, name, data, **env)[0]


def missing_data_line(data_dir: Path) -> str:
    """What a recipe says about missing AIME data: the one command that makes it."""
    return (
        f"recipe: TRAIN_FILES: {data_dir / 'train.parquet'} does not exist. Make them (AIME 1983-2024 from the "
        f"Hugging Face hub): {sys.executable} {ROOT}/recipes/data/aime.py --out-dir {data_dir}"
    )


FAKE_SERVE = """# a fake `vllm serve` (vllm.entrypoints.cli.main): answers GET /v1/models, records how it was started
import http.server, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_VLLM_LOG"], "a") as f:
    f.write(json.dumps({"argv": args, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "order": os.environ.get("CUDA_DEVICE_ORDER")}) + "\\n")
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(b'{"data": [{"id": "judge"}]}')
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Models).serve_forever()
"""
# every Python process of a README launch notes how it was started and on which GPUs (the trainer's are the plan's),
# and sees the node's disk (NODE_DISK_GIB free): the test needs no disk room, and checks the same on any machine
SITECUSTOMIZE = """import json, os, sys
if os.environ.get("FAKE_DISK_FREE_GIB"):  # the node's disk, whatever this machine's (first: the log below fails in
    # the launch's own process, which starts before its OUT_DIR is made)
    import collections, shutil
    free = int(os.environ["FAKE_DISK_FREE_GIB"]) * 2**30
    shutil.disk_usage = lambda path: collections.namedtuple("usage", "total used free")(2 * free, free, free)
if os.environ.get("FAKE_PROCS_LOG"):
    with open(os.environ["FAKE_PROCS_LOG"], "a") as f:
        f.write(json.dumps({"argv": sys.orig_argv, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "order": os.environ.get("CUDA_DEVICE_ORDER")}) + "\\n")
"""
NODE_DISK_GIB = 200  # free on the README node's disk (SITECUSTOMIZE): room for 2 checkpoints of 34.5 GiB


def readme_commands() -> dict[str, list[str]]:
    """The README's single-node commands ("On a GPU node"), as a user types them: SMOKE=1 and the full run."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## On a GPU node"):]
    section = section[: section.index("\n## ", 1)]
    found = {}
    for line in section.splitlines():
        words = shlex.split(line.strip()) if line.startswith("    ") and "bash recipes/" in line else []
        if words:
            found["smoke" if "SMOKE=1" in words else "run"] = words
    return found


def readme_launch(data: dict, words: list[str], fake: Path, ports: dict) -> tuple[str, dict, tuple]:
    """(recipe, environment, arguments) of a README command on a node of 8 idle 80 GB GPUs (tests/fake_gpus.py) and a
    disk with `NODE_DISK_GIB` free, with a fake `vllm serve` for the judge and verl's `--cfg job` in place of training;
    the model's config.json in the Hugging Face cache as a download leaves it (the disk check sizes its checkpoints
    from it)."""
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("recipes/"))
    script = next(w for w in words if w.startswith("recipes/"))
    name = Path(script).stem
    out = data["home"] / f"readme_{'smoke' if env.get('SMOKE') == '1' else 'run'}"
    return name, base_env(data, **data_env(name, data), **env, PYTHONPATH=str(fake / "py"), OUT_DIR=str(out),
                          FAKE_VLLM_LOG=str(out / "fake_vllm.jsonl"),
                          FAKE_PROCS_LOG=str(out / "procs.jsonl"), REWARD_PORT=str(ports["reward"]),
                          JUDGE_PORT=str(ports["judge"]), SERVER_START_TIMEOUT_S="240",
                          FAKE_DISK_FREE_GIB=str(NODE_DISK_GIB)), ("--cfg", "job")


@pytest.fixture(scope="module")
def slow(data):
    """The process-level checks, two at a time, started before the in-process tests run: a real DRY_RUN=1, and the
    README's two single-node commands through the whole launch path (node plan, judge and reward server started,
    checked and stopped) with a fake nvidia-smi and `vllm serve`, `--cfg job` in place of training."""
    fake = data["home"] / "fake"
    (fake / "py" / "vllm" / "entrypoints" / "cli").mkdir(parents=True)
    for package in ("vllm", "vllm/entrypoints", "vllm/entrypoints/cli"):
        (fake / "py" / package / "__init__.py").write_text("")
    (fake / "py" / "vllm" / "entrypoints" / "cli" / "main.py").write_text(FAKE_SERVE)
    (fake / "py" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    ports = {key: {"reward": free_port(), "judge": free_port()} for key in ("smoke", "run")}
    jobs = {
        "dry_run": ("aime_smollm", base_env(data, DRY_RUN="1", ALGO="dapo", DATA_DIR=str(data["no_aime"])), ()),
        **{f"readme_{key}": readme_launch(data, words, fake, ports[key]) for key, words in readme_commands().items()},
    }
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {key: pool.submit(run_recipe, name, env, *args, timeout=500) for key, (name, env, args) in jobs.items()}
    yield {"futures": futures, "ports": ports, "envs": {key: env for key, (_, env, _) in jobs.items()}}
    pool.shutdown(wait=True, cancel_futures=True)


def test_shellcheck_clean():
    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck is not installed: run `make setup` (apt-get install shellcheck)"
    scripts = sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "recipes").glob("*.sh"),
                                                          *(ROOT / "recipes" / "lib").glob("*.sh")])
    assert {f"recipes/{r}.sh" for r in RECIPES} | {"recipes/lib/run.sh", "recipes/cpu_train.sh"} <= set(scripts)
    res = subprocess.run([shellcheck, "-x", *scripts], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_recipe_is_an_entry_point_of_a_few_lines():
    """The shell files are what users type; the recipe itself is the table row its name picks (verl_bot/recipes/)."""
    assert sorted(TABLE) == sorted(RECIPES)
    for name in [*RECIPES, "cpu_train", "cpu_demo"]:
        text = (ROOT / "recipes" / f"{name}.sh").read_text()
        code = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        assert text.startswith("#!/usr/bin/env bash\n"), name
        assert code == ["set -euo pipefail", f'source "$(dirname "${{BASH_SOURCE[0]}}")/lib/run.sh" {name} "$@"'], name


EXPECTED = {
    # ALGO: adv_estimator, loss_agg_mode, policy loss, clip low/high, token-level rewards
    "bot": ("bot", "seq-mean-token-mean", "vanilla", 0.2, 0.2, True),
    "grpo": ("grpo", "seq-mean-token-mean", "vanilla", 0.2, 0.2, False),
    "gspo": ("grpo", "seq-mean-token-mean", "gspo", 3e-4, 4e-4, False),
    "dapo": ("grpo", "token-mean", "vanilla", 0.2, 0.28, False),
    "pure": ("pure", "seq-mean-token-mean", "vanilla", 0.2, 0.2, True),
    "pass": ("pass", "seq-mean-token-mean", "vanilla", 0.2, 0.2, True),
    "vps": ("vps", "seq-mean-token-mean", "vanilla", 0.2, 0.2, False),
    "reco": ("reco", "seq-mean-token-mean", "reco", 0.2, 0.2, False),
}
TASK_ALGOS = {"react": ALGOS, "aime": [*ALGOS, "vps"]}  # vps needs one correct answer per prompt


@pytest.mark.parametrize("name", RECIPES)
def test_every_algo_composes_and_validates(name, data, node, slow):
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from verl_bot.advantage.pass_ import PassSettings, pass_settings
    from verl_bot.advantage.pure import PureSettings
    from verl_bot.advantage.reco import RecoSettings
    from verl_bot.advantage.vps import VPSSettings
    from verl_bot.rewards.settings import manager_settings

    task, model_tag = name.split("_")
    data_dir = data["react"] if task == "react" else data["no_aime"]
    for algo in TASK_ALGOS[task]:
        args, stderr = dry_run_args(node, name, data, ALGO=algo, DATA_DIR=str(data_dir))
        if task == "aime":  # no data: said, and the config is still printed
            assert f"{missing_data_line(data_dir)} (DRY_RUN goes on; a launch stops here)" in stderr, stderr
        cfg = compose_verl_config(args)
        adv, agg, loss_mode, clip_low, clip_high, token_level = EXPECTED[algo]
        actor = cfg.actor_rollout_ref.actor
        assert cfg.algorithm.adv_estimator == adv, (name, algo)
        assert actor.loss_agg_mode == agg, (name, algo)
        assert actor.policy_loss.loss_mode == loss_mode, (name, algo)
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == (clip_low, clip_high), (name, algo)
        assert actor.optim.lr == 5e-7  # paper
        assert cfg.actor_rollout_ref.rollout.name == "vllm"
        assert cfg.actor_rollout_ref.model.path == MODELS[model_tag]
        assert cfg.actor_rollout_ref.rollout.n == 8
        assert cfg.data.train_batch_size == (8 if task == "aime" else 16)  # AIME: the paper's 8 x 8
        assert cfg.data.train_files == str(data_dir / "train.parquet")
        assert cfg.data.val_files == str(data_dir / "test.parquet")
        assert cfg.reward.reward_manager.name == "bot"
        bot = manager_settings(cfg)  # the manager's own parsing: unknown keys raise
        assert bot.per_token is token_level, (name, algo)
        assert bot.scorers == {task: f"http://127.0.0.1:{8801 if task == 'react' else 8802}"}
        assert bot.w_local == (0.5 if task == "react" else 1.0)
        assert cfg.algorithm.filter_groups.enable is (algo == "dapo")
        if algo == "dapo":
            assert cfg.algorithm.filter_groups.metric == "acc"  # the outcome, as DAPO filters (not G)
            assert actor.use_kl_loss is False
            overlong = cfg.reward.reward_kwargs.overlong_buffer_cfg
            assert overlong.enable is True and overlong.penalty_factor == 1.0
            assert cfg.reward.reward_kwargs.max_resp_len == cfg.data.max_response_length
            assert overlong.len == cfg.data.max_response_length // 4  # ours: a quarter of the length
        if algo == "pure":  # the PURE paper's temperature; the step scale is our per-task choice
            assert cfg.algorithm.use_kl_in_reward is False
            assert cfg.algorithm.pure_temperature == 0.1 and cfg.algorithm.pure_outcome_coef == 1.0
            assert cfg.algorithm.pure_step_scale == (1.0 if task == "react" else 10.0)
            # each method knob as its reader parses it: the declared defaults, but the recipe's named choice
            assert PureSettings.from_config(cfg.algorithm) == PureSettings(step_scale=1.0 if task == "react" else 10.0)
        if algo == "vps":  # GRPO-VPS: its agent loop probes the `<final>` answer; our knob defaults
            assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "vps_single_turn"
            assert VPSSettings.from_config(cfg.algorithm) == VPSSettings(template="final")
            assert {k for k in cfg.algorithm if str(k).startswith("vps_")} == {
                "vps_alpha", "vps_max_cuts", "vps_min_gap", "vps_cut_quantile", "vps_space", "vps_template"
            }
        if algo == "pass":  # our reconstruction's defaults, parsed by the estimator's own knob parser
            assert cfg.algorithm.use_kl_in_reward is False
            assert pass_settings(cfg.algorithm) == PassSettings()
            assert {k for k in cfg.algorithm if str(k).startswith("pass_")} == {
                "pass_format_coef", "pass_process_coef", "pass_dead_zone", "pass_min_chunk", "pass_density", "pass_op"
            }
        # one on-policy update per step, but ReCo's token ratio needs several (4)
        assert actor.ppo_mini_batch_size == cfg.data.train_batch_size // (4 if algo == "reco" else 1)
        if algo == "reco":
            assert cfg.algorithm.reco_w_max == 5.0 and cfg.algorithm.reco_occurrence == "count_model"
            assert RecoSettings.from_config(cfg.algorithm) == RecoSettings()
        if model_tag == "smollm":
            assert cfg.data.apply_chat_template_kwargs.enable_thinking is False
        assert cfg.trainer.experiment_name == f"{name}_{algo}_s0"
        # what verl itself checks before it starts Ray, plus the registries the run will look up
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        assert not need_critic(cfg)
        # verl's own algorithm keys make a valid AlgoConfig (verl-bot's `+algorithm.pure_*` knobs are extra keys,
        # which verl's trainer passes through: it never converts `algorithm` to the dataclass)
        verl_keys = {
            k: v
            for k, v in cfg.algorithm.items()
            if not str(k).startswith(("pure_", "bot_", "pass_", "reco_", "vps_"))
        }
        omega_conf_to_dataclass(OmegaConf.create(verl_keys), dataclass_type=AlgoConfig)
        get_adv_estimator_fn(cfg.algorithm.adv_estimator)
        get_policy_loss_fn(actor.policy_loss.loss_mode)


@pytest.mark.parametrize("name", RECIPES)
def test_grail_composes_for_aime_and_is_refused_for_react(name, data, node):
    """ALGO=grail: AIME recipes compose a config that verl and verl-bot's start-up checks accept; React
    recipes stop with one line (a component has no single final answer)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from verl_bot.launch.preflight import check_config
    from verl_bot.rewards.settings import manager_settings

    if name.startswith("react"):
        ran = node(name, DRY_RUN="args", ALGO="grail", **data_env(name, data))
        assert ran.rc == 2 and ran.out == []
        assert last_line(ran.err) == (
            "recipe: ALGO=grail needs one final answer per response (<final>...</final>); react responses have none: "
            "use it with the AIME recipes"
        )
        return
    cfg = compose_verl_config(recipe_args(node, name, data, ALGO="grail"))
    assert cfg.algorithm.adv_estimator == "grail"
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert manager_settings(cfg).per_token is False
    assert cfg.trainer.experiment_name == f"{name}_grail_s0"
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    check_config(cfg)  # verl-bot's start-up checks (GRAIL: fsdp2, no Ulysses, no fused kernels, scalar rewards)


def test_env_settings_reach_the_config(data, node, slow):
    model_dir = data["home"] / "local_model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text("{}")  # a local model directory: config.json is checked
    args, _ = dry_run_args(
        node, "aime_qwen", data, "trainer.total_training_steps=7",  # the user's arguments go through, last: they win
        ALGO="gspo", GSPO_TOKEN="1", LR="1e-6", ROLLOUT_N="4", NGPUS_PER_NODE="4", NNODES="2", KL_LOSS_COEF="0.001",
        MODEL_PATH=str(model_dir), REWARD_URL="http://a:8802,http://b:8802", REPORT_STEPS="1,-1", REPORT_GROUPS="2",
    )
    cfg = compose_verl_config(args)
    assert cfg.algorithm.adv_estimator == "bot"  # GSPO-token: BoT advantages with the gspo loss
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert cfg.reward.reward_kwargs.bot.token_level is True
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (4, 2)
    assert cfg.actor_rollout_ref.actor.use_kl_loss is True
    assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0.001
    assert cfg.actor_rollout_ref.model.path == str(model_dir)
    assert cfg.reward.reward_kwargs.bot.scorers.aime == "http://a:8802,http://b:8802"  # one string: round-robin
    assert cfg.trainer.experiment_name == "aime_qwen_gspo_token_s0"
    assert cfg.trainer.total_training_steps == 7
    assert list(cfg.algorithm.token_report_steps) == [1, -1] and cfg.algorithm.token_report_groups == 2
    assert cfg.algorithm.token_report_dir == str(data["home"] / "out" / "token_records")
    assert token_records.recorded_steps(cfg.algorithm, cfg.trainer.total_training_steps) == {1, 7}


def test_a_knobs_variable_sets_it_and_a_bad_value_is_one_line(data, node):
    """A method knob's variable (its key upper-cased) is its value, checked as the method's reader checks it."""
    args = recipe_args(node, "aime_qwen", data, ALGO="pass", PASS_DENSITY="chunk", PASS_MIN_CHUNK="3")
    assert "+algorithm.pass_density=chunk" in args and "+algorithm.pass_min_chunk=3" in args
    ran = node("aime_qwen", DRY_RUN="args", ALGO="pass", PASS_DENSITY="nope", **data_env("aime_qwen", data))
    assert ran.rc == 2 and ran.out == []
    assert last_line(ran.err) == ("recipe: PASS_DENSITY=nope: +algorithm.pass_density='nope': must be one of suffix, "
                                  "sequence, chunk")


def launch_env(name, data, **env):
    # NGPUS_PER_NODE=9999: even on a GPU machine the launch stops at the GPU check, never trains
    return {**data_env(name, data), "NGPUS_PER_NODE": "9999", **env}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"ALGO": "ppo"}, "recipe: ALGO must be one of bot, grpo, gspo, dapo, pure, pass, reco, vps, grail; got 'ppo'"),
        ({"MODEL_PATH": "/nonexistent/model"}, "recipe: MODEL_PATH=/nonexistent/model: no such model directory"),
        ({"MODEL_PATH": "not a model"}, "recipe: MODEL_PATH=not a model is neither a local model directory nor"),
        ({"TRAIN_FILES": "/nonexistent/train.parquet"}, "recipe: TRAIN_FILES: /nonexistent/train.parquet does not"),
        ({"VAL_FILES": "[/nonexistent/a.parquet,/nonexistent/b.parquet]"}, "recipe: VAL_FILES: /nonexistent/a.parq"),
        ({"TRAIN_BATCH_SIZE": "sixteen"}, "recipe: TRAIN_BATCH_SIZE must be an integer, got 'sixteen'"),
    ],
)
def test_missing_pieces_are_one_clear_line(env, expected, data, node):
    ran = node("aime_smollm", **launch_env("aime_smollm", data, **env))
    assert ran.rc == 2, ran.err[-1500:]
    assert ran.out == []
    assert last_line(ran.err).startswith(expected), last_line(ran.err)


def test_the_shell_entry_refuses_a_missing_python_in_one_line(data):
    res = run_recipe("aime_smollm", base_env(data, **launch_env("aime_smollm", data, PY="/nonexistent/python")))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("recipe: no Python at PY=/nonexistent/python: run 'make setup' (or set PY to the environment "
                          "with verl)\n")


def test_react_refuses_vps_in_one_line(data, node):
    for name in ("react_qwen", "react_smollm", "react_phi"):
        ran = node(name, DRY_RUN="args", ALGO="vps", **data_env(name, data))
        assert ran.rc == 2 and not ran.out
        assert last_line(ran.err).startswith("recipe: ALGO=vps probes the model's belief in one correct answer")
        assert "react prompts have no single correct answer: use it with the AIME recipes" in last_line(ran.err)


USER = ["+algorithm.pure_temperature=0.2", "algorithm.pure_step_scale=3", "+reward.reward_kwargs.bot.w_local=0.3"]


def test_the_users_overrides_win(data, node):
    """Every extra argument goes last and wins, also `+key=` for a key the recipe appends itself (Hydra refuses a
    second `+key`: the recipe drops its own), and a plain `key=` after the recipe's `+key=`."""
    args = recipe_args(node, "aime_qwen", data, ALGO="pure")
    assert "+algorithm.pure_temperature=0.1" in args and "+reward.reward_kwargs.bot.w_local=1.0" in args
    with pytest.raises(Exception, match="Could not append to config"):
        compose_verl_config([*args, *USER])  # what Hydra does with the recipe's and the user's `+key`
    args, _ = dry_run_args(node, "aime_qwen", data, *USER, ALGO="pure")
    assert "+algorithm.pure_temperature=0.1" not in args and "+reward.reward_kwargs.bot.w_local=1.0" not in args
    assert "+algorithm.pure_step_scale=10.0" in args  # kept: the user's plain key comes after it
    cfg = compose_verl_config(args)
    assert cfg.algorithm.pure_temperature == 0.2
    assert cfg.algorithm.pure_step_scale == 3
    assert cfg.reward.reward_kwargs.bot.w_local == 0.3


def test_the_shell_entry_passes_the_users_overrides_last(data):
    """`bash recipes/X.sh ARGS`: the environment and the arguments reach the recipe as typed."""
    res = run_recipe("aime_qwen", base_env(data, DRY_RUN="args", ALGO="pure", **data_env("aime_qwen", data)), *USER)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[-3:] == USER
    assert "+algorithm.pure_temperature=0.1" not in res.stdout.splitlines()


# What an algorithm is (the keys below): the same in the CPU run and in the GPU recipes, both from verl_bot/recipes/
# algos.py. Only these knobs differ: the CPU run sets them for responses of tens of tokens.
ALGO_KEYS = ("algorithm.", "actor_rollout_ref.actor.policy_loss.loss_mode", "actor_rollout_ref.actor.loss_agg_mode",
             "actor_rollout_ref.actor.clip_ratio", "actor_rollout_ref.actor.use_kl_loss",
             "actor_rollout_ref.rollout.agent.default_agent_loop", "reward.reward_kwargs.bot.token_level",
             "reward.reward_kwargs.overlong_buffer_cfg.")
PER_RECIPE = {"algorithm.vps_min_gap", "algorithm.vps_max_cuts", "algorithm.vps_cut_quantile",
              "reward.reward_kwargs.overlong_buffer_cfg.len"}


def algo_part(cfg) -> dict:
    def flat(node, prefix=""):
        if isinstance(node, dict):
            return {k: v for key, sub in node.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
        return {prefix[:-1]: node}

    items = flat(OmegaConf.to_container(cfg, resolve=True))
    return {k: v for k, v in items.items() if k.startswith(ALGO_KEYS) and k not in PER_RECIPE}


@pytest.mark.parametrize("algo", [*ALGOS, "vps", "grail"])
def test_cpu_run_is_the_recipes_algorithm(algo, data, node):
    cpu = compose_verl_config(cpu_train_args(algo, "toy_math"))
    gpu = compose_verl_config(recipe_args(node, "aime_qwen", data, ALGO=algo))
    assert algo_part(cpu) == algo_part(gpu)
    assert cpu.algorithm.adv_estimator == gpu.algorithm.adv_estimator != ""
    if algo == "vps":  # tens of tokens on the CPU
        assert (cpu.algorithm.vps_min_gap, cpu.algorithm.vps_max_cuts, cpu.algorithm.vps_cut_quantile) == (4, 4, 0.25)


@pytest.mark.parametrize(
    "algo, expected",
    [
        ("vps", "cpu_train.sh: ALGO=vps probes the model's belief in one correct answer (reward_model.ground_truth); "
         "toy_lint prompts have no single correct answer: use it with TASK=toy_math"),
        ("grail", "cpu_train.sh: ALGO=grail needs one final answer per response (<final>...</final>); toy_lint "
         "responses have none: use it with TASK=toy_math"),
    ],
)
def test_cpu_run_refuses_answer_methods_on_toy_lint(algo, expected, tmp_path, capsys):
    env = {"ALGO": algo, "TASK": "toy_lint", "OUT_DIR": str(tmp_path / "out"), "PY": "/nonexistent/python"}
    assert cpu_train.main(env, []) == 2  # refused before a model, the data or the run's folder is made
    assert capsys.readouterr().err.splitlines()[-1] == expected
    assert not (tmp_path / "out").exists()


def test_cpu_run_lets_the_user_set_a_knob():
    cfg = compose_verl_config(cpu_train_args("vps", "toy_math", "+algorithm.vps_alpha=0.3",
                                             "+reward.reward_kwargs.bot.w_local=2"))
    assert (cfg.algorithm.vps_alpha, cfg.reward.reward_kwargs.bot.w_local) == (0.3, 2)


def test_aime_data_missing_says_how_to_make_it(data, node):
    data_dir = data["no_aime"]
    ran = node("aime_phi", **launch_env("aime_phi", data, DATA_DIR=str(data_dir)))
    assert ran.rc == 2
    assert last_line(ran.err) == missing_data_line(data_dir)


def test_dry_run_says_which_inputs_are_missing_and_goes_on(data, node):
    missing = {"MODEL_PATH": "/nonexistent/model", "VAL_FILES": "/nonexistent/val.parquet"}
    args, stderr = dry_run_args(node, "aime_qwen", data, **missing)
    assert "actor_rollout_ref.model.path=/nonexistent/model" in args
    assert "data.val_files=/nonexistent/val.parquet" in args
    goes_on = " (DRY_RUN goes on; a launch stops here)"
    assert [line for line in stderr.splitlines() if line.startswith("recipe: ")] == [
        "recipe: MODEL_PATH=/nonexistent/model: no such model directory" + goes_on,
        "recipe: VAL_FILES: /nonexistent/val.parquet does not exist. Make them (AIME 1983-2024 from the Hugging "
        f"Face hub): {sys.executable} {ROOT}/recipes/data/aime.py --out-dir {data['aime']}" + goes_on,
    ]


def test_react_data_is_made_when_missing(data, node):
    target = data["home"] / "react_auto"
    args = recipe_args(node, "react_phi", {**data, "react": target})
    assert (target / "train.parquet").is_file() and (target / "test.parquet").is_file()
    assert f"data.val_files={target / 'test.parquet'}" in args


class _Health(http.server.BaseHTTPRequestHandler):
    body = b"{}"
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/health":
            self.send_response(self.status)
            self.end_headers()
            self.wfile.write(self.body)
        elif self.path == "/v1/models":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": [{"id": "judge"}]}')
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    servers = []

    def start(body: bytes, status: int = 200) -> str:
        handler = type("H", (_Health,), {"body": body, "status": status})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()


def test_reward_server_down_is_one_line(data, node):
    url = f"http://127.0.0.1:{free_port()}"
    ran = node("aime_qwen", **launch_env("aime_qwen", data, ALGO="grpo", REWARD_URL=url))
    assert ran.rc == 2
    assert last_line(ran.err).startswith(f"recipe: reward server {url} does not answer GET /health"), ran.err


def test_server_without_the_needed_judge_is_refused(data, node, fake_server):
    react = fake_server(b'{"status": "ok", "judges": {"llm": "disabled", "vlm": "disabled"}}')
    ran = node("react_qwen", **launch_env("react_qwen", data, REWARD_URL=react))
    assert ran.rc == 2
    assert last_line(ran.err) == (
        f'recipe: reward server {react} has no working LLM code judge (its /health: {{"status": "ok", "judges": '
        '{"llm": "disabled", "vlm": "disabled"}}); configure one (LLM_JUDGE_BASE_URL), or REQUIRE_JUDGE=0 to run '
        "without it")
    # REQUIRE_JUDGE=0 (the compiler + ESLint ablation) passes the server check and stops at the GPUs
    ran = node("react_qwen", **launch_env("react_qwen", data, REWARD_URL=react, REQUIRE_JUDGE="0"))
    assert ran.rc == 2
    assert last_line(ran.err).startswith("recipe: NGPUS_PER_NODE=9999 but this node has 8 GPU(s)"), last_line(ran.err)
    # AIME: BoT needs the step judge, GRPO does not
    aime = fake_server(b'{"status": "ok", "judge": "disabled"}')
    ran = node("aime_qwen", **launch_env("aime_qwen", data, ALGO="bot", REWARD_URL=aime))
    assert last_line(ran.err).startswith(f"recipe: reward server {aime} has no working step judge")
    ran = node("aime_qwen", **launch_env("aime_qwen", data, ALGO="grpo", REWARD_URL=aime))
    assert "has no working" not in ran.err and ran.rc == 2


def test_healthy_server_and_judge_pass_the_checks(data, node, fake_server):
    url = fake_server(b'{"status": "ok", "judges": {"llm": "up", "vlm": "disabled"}}')
    ran = node("react_qwen", **launch_env("react_qwen", data, REWARD_URL=url, LLM_JUDGE_BASE_URL=f"{url}/v1"))
    assert ran.rc == 2
    # every check before the GPUs passed
    assert last_line(ran.err).startswith("recipe: NGPUS_PER_NODE=9999 but this node has 8 GPU(s)"), last_line(ran.err)


def test_judge_endpoint_down_is_one_line(data, node):
    judge = f"http://127.0.0.1:{free_port()}/v1"
    ran = node("aime_qwen", **launch_env("aime_qwen", data, STEP_JUDGE_BASE_URL=judge))
    assert ran.rc == 2
    assert last_line(ran.err) == (f"recipe: judge endpoint STEP_JUDGE_BASE_URL={judge} does not answer GET "
                                  f"{judge}/models (start it, e.g. 'vllm serve MODEL --port 8000')")


def test_start_server_needs_the_judge_it_requires(data, node):
    """START_SERVER=1 starts the judge it needs (START_JUDGE=auto); with START_JUDGE=0 and no judge URL it says
    which variable to set."""
    ran = node("react_qwen", **launch_env("react_qwen", data, START_SERVER="1", START_JUDGE="0"))
    assert ran.rc == 2
    assert last_line(ran.err) == (
        "recipe: START_SERVER=1 needs LLM_JUDGE_BASE_URL (the LLM code judge): set it, or START_JUDGE=1 to start one "
        "here from JUDGE_MODEL_PATH, or REQUIRE_JUDGE=0 to run without it"
    )


def test_dry_run_prints_verls_composed_config(data, node, slow):
    res = slow["futures"]["dry_run"].result()
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{missing_data_line(data['no_aime'])} (DRY_RUN goes on; a launch stops here)" in res.stderr
    printed = OmegaConf.create(res.stdout)
    composed = compose_verl_config(recipe_args(node, "aime_smollm", data, ALGO="dapo", DATA_DIR=str(data["no_aime"])))
    assert OmegaConf.to_container(printed) == OmegaConf.to_container(composed)
    assert printed.algorithm.filter_groups.enable is True
    assert printed.actor_rollout_ref.actor.clip_ratio_high == 0.28


def readme_ckpt(data: dict, env: dict, keep_at_once: int) -> Path:
    """Where the README's run keeps its checkpoints: `keep_at_once` of Qwen2.5-3B, which fit on the node's disk (what
    a disk too small makes a launch say: test_checkpoints_the_disk_cannot_hold_are_refused)."""
    ckpt = data["home"] / "verl_bot_ckpt" / "verl_bot" / f"react_qwen_bot_s0{'_smoke' if env.get('SMOKE') else ''}"
    _, existing = node_plan.disk_state(str(ckpt))
    params = node_plan.param_count(fake_gpus.QWEN25_3B_CONFIG)
    saves = 1 if env.get("SMOKE") else 6
    assert node_plan.kept_at_once(2, saves) == keep_at_once
    assert node_plan.disk_problem(str(ckpt), NODE_DISK_GIB * 2**30, existing, params, 2, saves) is None
    return ckpt


def check_readme_launch(data: dict, slow: dict, key: str) -> subprocess.CompletedProcess:
    """What both README commands must show on 8 idle 80 GB GPUs and a disk with room: the plan (trainer 0-3, the
    judge on 4-7, memory and disk checked), the judge started on its GPUs only, the trainer on its own, the reward
    server started, checked and stopped with the judge."""
    res, env = slow["futures"][f"readme_{key}"].result(), slow["envs"][f"readme_{key}"]
    at_once = 1 if key == "smoke" else 2
    ckpt = readme_ckpt(data, env, at_once)
    plan = next((line for line in res.stderr.splitlines() if line.startswith("node plan: ")), res.stderr[-3000:])
    assert plan.startswith(
        "node plan: trainer GPUs 0,1,2,3 (4 x 80 GiB; 32 rollouts per vLLM engine a step), LLM judge GPUs 4,5,6,7, "
        f"no GPU idle; checkpoints: {at_once} at once of 34.5 GiB in {ckpt} ({NODE_DISK_GIB} GiB free)"
    ), plan
    out, ports = Path(env["OUT_DIR"]), slow["ports"][key]
    judges = [json.loads(line) for line in (out / "fake_vllm.jsonl").read_text().splitlines()]
    assert judges == [{
        "argv": ["serve", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory-utilization", "0.9", "--tensor-parallel-size",
                 "1", "--data-parallel-size", "4", "--host", "127.0.0.1", "--port", str(ports["judge"]),
                 "--served-model-name", "judge"],
        "gpus": "4,5,6,7", "order": "PCI_BUS_ID",
    }]
    procs = [json.loads(line) for line in (out / "procs.jsonl").read_text().splitlines()]
    trainer = [p for p in procs if "verl.trainer.main_ppo" in p["argv"]]
    assert [(p["gpus"], p["order"]) for p in trainer] == [("0,1,2,3", "PCI_BUS_ID")]  # the trainer's GPUs, only
    server = [p for p in procs if "reward_servers.react" in p["argv"]]
    assert server and server[0]["argv"][-4:] == ["--host", "127.0.0.1", "--port", str(ports["reward"])]
    assert "Uvicorn running" in (out / "reward_server.log").read_text()
    assert (out / "ckpt").is_symlink() and (out / "ckpt").resolve() == ckpt
    time.sleep(0.5)
    for port in ports.values():  # the judge and the reward server stopped on exit: their ports are free again
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0
    return res


def test_the_readmes_full_run_starts_its_judge_beside_the_trainer_on_an_8_gpu_node(data, slow):
    """README, "On a GPU node": `START_SERVER=1 ALGO=bot bash recipes/react_qwen.sh` as typed, `--cfg job` in place
    of training: the composed run trains on 4 GPUs, keeps 2 checkpoints outside the repository, scores on the server
    the recipe started, whose health says the judge the recipe started is up."""
    assert readme_commands()["run"] == ["START_SERVER=1", "ALGO=bot", "bash", "recipes/react_qwen.sh"]
    res = check_readme_launch(data, slow, "run")
    assert res.returncode == 0, res.stderr[-3000:]
    printed = OmegaConf.create(res.stdout)
    assert (printed.trainer.n_gpus_per_node, printed.trainer.nnodes) == (4, 1)
    assert printed.trainer.max_actor_ckpt_to_keep == printed.trainer.max_critic_ckpt_to_keep == 2
    assert not Path(printed.trainer.default_local_dir).is_relative_to(ROOT)
    assert printed.reward.reward_kwargs.bot.scorers.react == f"http://127.0.0.1:{slow['ports']['run']['reward']}"


def test_the_readmes_smoke_names_its_node_plan_in_the_verdict(data, slow):
    """README: `SMOKE=1 ALGO=bot bash recipes/react_qwen.sh` on a GPU node starts the judge it needs (no variable to
    set) and its verdict block names the plan it ran on (here a FAIL: `--cfg job` trains no step)."""
    assert readme_commands()["smoke"] == ["SMOKE=1", "ALGO=bot", "bash", "recipes/react_qwen.sh"]
    res = check_readme_launch(data, slow, "smoke")
    verdict = res.stdout[res.stdout.index("== verl-bot smoke verdict: react_qwen.sh ALGO=bot =="):]
    plan = next(line.strip() for line in verdict.splitlines() if line.strip().startswith("node plan"))
    assert plan.startswith("node plan           trainer GPUs 0,1,2,3 (4 x 80 GiB; 32 rollouts per vLLM engine a "
                           "step), LLM judge GPUs 4,5,6,7, no GPU idle; checkpoints: 1 at once"), plan
    assert "  platform            gpu\n" in verdict and res.returncode == 1
    assert f"LLM code judge at http://127.0.0.1:{slow['ports']['smoke']['judge']}/v1" in verdict  # the one it started


# What a model's recipe changes against the task's qwen recipe (docs/recipes.md, "Recipes"): the model, its run's
# names and paths, SmolLM3's thinking switch, and Phi-4-mini-reasoning's longer responses (with what is sized from
# them: the rollout's context, the micro-batch token budget, DAPO's overlong cache zone).
RUN_KEYS = {"actor_rollout_ref.model.path", "trainer.experiment_name", "trainer.default_local_dir",
            "trainer.rollout_data_dir", "trainer.validation_data_dir"}
MODEL_KEYS = {
    "react_smollm": {"+data.apply_chat_template_kwargs.enable_thinking"},
    "aime_smollm": {"+data.apply_chat_template_kwargs.enable_thinking"},
    "react_phi": {"data.max_response_length", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                  "actor_rollout_ref.rollout.max_model_len", "+reward.reward_kwargs.overlong_buffer_cfg.len",
                  "+reward.reward_kwargs.max_resp_len"},
    "aime_phi": {"data.max_response_length", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                 "actor_rollout_ref.rollout.max_model_len", "+reward.reward_kwargs.overlong_buffer_cfg.len",
                 "+reward.reward_kwargs.max_resp_len"},
}


def as_dict(args: list[str]) -> dict[str, str]:
    out = {}
    for arg in args:
        key, _, value = arg.partition("=")
        out[key] = value
    return out


LENGTH_KEYS = {"data.max_response_length", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
               "actor_rollout_ref.rollout.max_model_len", "+reward.reward_kwargs.overlong_buffer_cfg.len",
               "+reward.reward_kwargs.max_resp_len"}


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
@pytest.mark.parametrize("name", sorted(MODEL_KEYS))
def test_a_model_recipe_differs_from_qwens_only_in_its_named_keys(name, platform, data, node):
    """Every ALGO, on a GPU node and on the CPU platform (where each runs its own family's tiny model and the CPU
    presets set the response length)."""
    task = name.split("_")[0]
    for algo in ALGOS + (["vps", "grail"] if task == "aime" else []):
        env = {"ALGO": algo, **({"PLATFORM": "cpu"} if platform == "cpu" else {})}
        qwen = as_dict(recipe_args(node, f"{task}_qwen", data, **env))
        other = as_dict(recipe_args(node, name, data, **env))
        differ = {k for k in qwen.keys() | other.keys() if qwen.get(k) != other.get(k)}
        allowed = RUN_KEYS | MODEL_KEYS[name]
        must = {"trainer.experiment_name", "actor_rollout_ref.model.path"} | (MODEL_KEYS[name] - LENGTH_KEYS)
        if platform == "cpu":
            allowed -= LENGTH_KEYS
        elif name.endswith("_phi"):
            must |= {"data.max_response_length", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                     "actor_rollout_ref.rollout.max_model_len"}
        assert must <= differ <= allowed, (algo, sorted(differ - allowed), sorted(must - differ))


# --- the node plan (verl_bot/launch/node_plan.py) as the recipes compose and check it
# ------------------------------------
def plan_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("node plan: "))


@pytest.mark.parametrize(
    "name, env, plan",
    [
        # the judges given by URL (or none needed): the trainer takes the node, but AIME's 64 rollouts keep 4 engines
        ("react_qwen", {}, "trainer GPUs 0,1,2,3,4,5,6,7 (8 x 80 GiB; 16 rollouts per vLLM engine a step), no GPU "
         "idle"),
        ("aime_qwen", {"ALGO": "grpo"}, "trainer GPUs 0,1,2,3 (4 x 80 GiB; 16 rollouts per vLLM engine a step), idle "
         "GPUs 4,5,6,7"),
        # the recipe starts the judge it needs (START_SERVER=1: START_JUDGE=auto) on the GPUs the trainer leaves
        ("react_smollm", {"START_SERVER": "1"}, "trainer GPUs 0,1,2,3 (4 x 80 GiB; 32 rollouts per vLLM engine a "
         "step), LLM judge GPUs 4,5,6,7, no GPU idle"),
        ("react_phi", {"START_SERVER": "1", "VLM_JUDGE_MODEL_PATH": "Qwen/Qwen2.5-VL-7B-Instruct"}, "trainer GPUs "
         "0,1,2,3 (4 x 80 GiB; 32 rollouts per vLLM engine a step), LLM judge GPUs 4,5, VLM judge GPUs 6,7, no GPU "
         "idle"),
        ("aime_smollm", {"START_SERVER": "1", "ALGO": "pure"}, "trainer GPUs 0,1,2,3 (4 x 80 GiB; 16 rollouts per "
         "vLLM engine a step), step judge GPUs 4,5,6,7, no GPU idle"),
        ("aime_phi", {"START_SERVER": "1", "ALGO": "reco"}, "trainer GPUs 0,1,2,3 (4 x 80 GiB; 16 rollouts per vLLM "
         "engine a step), idle GPUs 4,5,6,7"),  # reco needs no step judge
        ("react_qwen", {"START_SERVER": "1", "FAKE_GPUS": "7"}, "trainer GPUs 0,1,2,3 (4 x 80 GiB; 32 rollouts per "
         "vLLM engine a step), LLM judge GPUs 4,5,6, no GPU idle"),  # 7 GPUs: verl would pad 128 rollouts on 7 or 6
        ("aime_qwen", {"SMOKE": "1", "PLATFORM": "gpu"}, "trainer GPUs 0,1,2,3 (4 x 80 GiB; 16 rollouts per vLLM "
         "engine a step), step judge GPUs 4,5,6,7, no GPU idle"),  # the smoke runs on the full run's plan
    ],
)
def test_every_recipes_gpu_command_line_is_its_node_plan(name, env, plan, data, node, tmp_path):
    """DRY_RUN=args on the fake nvidia-smi's 8 idle 80 GB GPUs (7 in one case): the plan the recipe prints is the
    one its command line composes (trainer.n_gpus_per_node), and verl accepts that line."""
    if env.get("FAKE_GPUS"):
        env = {**env, "FAKE_GPUS": str(fake_gpus.write_spec(tmp_path / "gpus.json", n=int(env["FAKE_GPUS"])))}
    args, stderr = dry_run_args(node, name, data, **env)
    assert plan_line(stderr) == f"node plan: {plan}"
    cfg = compose_verl_config(args)
    assert cfg.trainer.n_gpus_per_node == len(plan.split(" (")[0].split(" ")[-1].split(","))
    assert cfg.trainer.max_actor_ckpt_to_keep == 2


def test_without_nvidia_smi_a_dry_run_plans_the_recipes_node(data, node, tmp_path):
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 127\n")  # what a machine without the driver answers
    (tmp_path / "nvidia-smi").chmod(0o755)
    args, stderr = dry_run_args(node, "react_qwen", data, PATH=f"{tmp_path}:{os.environ['PATH']}")
    assert plan_line(stderr).endswith(", no GPU idle (assumed: 8 GPUs of 80 GB, no nvidia-smi here)")
    assert "trainer.n_gpus_per_node=8" in args


def test_several_nodes_give_every_process_of_the_run_the_judges_to_reach(data, node):
    args = recipe_args(node, "aime_qwen", data, NNODES="2", REWARD_URL="http://rw1:8802",
                       STEP_JUDGE_BASE_URL="http://judge1:8000/v1")
    cfg = compose_verl_config(args)
    reach = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_BOT_REACH_URLS
    assert reach == "STEP_JUDGE_BASE_URL=http://judge1:8000/v1"
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 2)  # 64 rollouts: 4 engines of 16 in all


def refused(node, data: dict, name: str, tmp_path: Path, gpus: dict | None = None, **env: str) -> str:
    """The launch's one line: it stops before the judge, the reward server or Ray starts (START_SERVER=1 would
    start both here)."""
    spec = fake_gpus.write_spec(tmp_path / "gpus.json", **(gpus or {}))
    out = tmp_path / "out"
    ran = node(name, **data_env(name, data), **{"START_SERVER": "1", "FAKE_GPUS": str(spec), "OUT_DIR": str(out),
                                                **env})
    assert ran.rc == 2 and ran.out == [], ran.err[-3000:]
    assert not (out / "judge.log").exists() and not (out / "reward_server.log").exists()
    return last_line(ran.err)


CKPT = "verl_bot_ckpt/verl_bot"


def test_a_busy_gpu_is_refused_with_its_holder(data, node, tmp_path):
    """The README's old judge (`vllm serve` at 90% of GPU 0, started by hand) on the GPU the plan gives the trainer."""
    line = refused(node, data, "react_qwen", tmp_path, {"free": {0: 8112}, "apps": {4242: 0}})
    assert line == (
        "recipe: GPU 0 has 7.9 GiB free of 79.6 GiB, below the 50.7 GiB the trainer asks there (0.6 x 79.6 GiB + 2.9 "
        "GiB of the actor's weights); held by pid 4242 (nvidia-smi): free it, or give the run other GPUs "
        "(TRAIN_GPUS, JUDGE_GPUS; with room: 1,2,3,4,5,6,7)"
    )


@pytest.mark.parametrize(
    "gpus, env, line",
    [
        ({"n": 7}, {"NGPUS_PER_NODE": "7", "START_JUDGE": "0", "REQUIRE_JUDGE": "0"}, "recipe: 7 trainer GPU(s) x 1 "
         "node(s) do not divide the 128 rollouts of a mini-batch (16 prompts x 8): verl would pad every step to 896 "
         "rows with synthetic ones; use a GPU count that divides 128 (NGPUS_PER_NODE or TRAIN_GPUS), or change "
         "TRAIN_BATCH_SIZE"),
        ({"n": 0}, {}, "recipe: nvidia-smi lists no GPU on this node (a driver or container problem?)"),
        ({"broken": 9}, {}, "recipe: nvidia-smi lists no GPU on this node (a driver or container problem?)"),
        ({}, {"VERL_PLATFORM": "cpu"}, "recipe: VERL_PLATFORM=cpu is set in this GPU run's environment: it would turn "
         "verl-bot's CPU backend on (training on the CPU); unset it (PLATFORM=cpu runs the recipe on the CPU)"),
        ({}, {"CUDA_VISIBLE_DEVICES": ""}, "recipe: CUDA_VISIBLE_DEVICES is set but empty: CUDA sees none of this "
         "node's 8 GPU(s); unset it (the recipe picks the GPUs: TRAIN_GPUS, JUDGE_GPUS)"),
        ({}, {"NNODES": "2"}, "recipe: NNODES=2 with START_JUDGE=1: the Ray cluster of a multi-node run is started "
         "before the recipe and may hold every GPU of this node; serve the judges outside it and pass their URLs "
         "(LLM_JUDGE_BASE_URL, VLM_JUDGE_BASE_URL, STEP_JUDGE_BASE_URL)"),
        ({}, {"NNODES": "2", "REWARD_HOST": "127.0.0.1", "REQUIRE_JUDGE": "0"}, "recipe: NNODES=2 and REWARD_URL is at "
         "http://127.0.0.1:8801, a loopback address the other nodes cannot reach; use an address every node reaches "
         "(REWARD_HOST for the reward server the recipe starts)"),
    ],
)
def test_what_cannot_run_stops_before_anything_starts_in_one_line(gpus, env, line, data, node, tmp_path):
    assert refused(node, data, "react_qwen", tmp_path, gpus, **env) == line


def test_checkpoints_the_disk_cannot_hold_are_refused(data, node, tmp_path):
    # 12 PB a checkpoint (the weights offloaded to the CPU: no GPU would hold their shard either)
    line = refused(node, data, "aime_qwen", tmp_path, MODEL_PARAMS="1e15", OFFLOAD="True", ALGO="grpo")
    ckpt = data["home"] / CKPT / "aime_qwen_grpo_s0"
    assert line.startswith(f"recipe: CKPT_DIR={ckpt} is on a disk with ")
    assert line.endswith(" GiB free, below the 22351741.8 GiB the run's checkpoints take: 2 of 11175870.9 GiB at once "
                         "(KEEP_CKPTS=2, 8 save(s); 1000000.00B parameters x 12 bytes: fp32 weights and Adam's "
                         "moments); point CKPT_DIR at a disk with room")


def test_a_judge_given_by_url_is_refused_on_the_trainers_gpus(data, node, tmp_path, fake_server):
    """The judge's port is served by this test's process, which the fake nvidia-smi shows on GPU 0; several nodes
    refuse its loopback address."""
    url = fake_server(b"{}")
    judge = {"LLM_JUDGE_BASE_URL": f"{url}/v1"}
    line = refused(node, data, "react_qwen", tmp_path, {"apps": {os.getpid(): 0}}, TRAIN_GPUS="0,1,2,3", **judge)
    assert line == (
        f"recipe: LLM_JUDGE_BASE_URL={url}/v1 (pid {os.getpid()}) is served from GPU 0, which the trainer needs "
        "(TRAIN_GPUS=0,1,2,3): give the trainer other GPUs, or let the recipe start and place the judge (unset the "
        "URL; START_JUDGE=1 with JUDGE_MODEL_PATH)"
    )
    line = refused(node, data, "react_qwen", tmp_path, {"apps": {os.getpid(): 0}}, NNODES="2", **judge)
    assert line.startswith(f"recipe: NNODES=2 and LLM_JUDGE_BASE_URL is at {url}/v1, a loopback address")


@pytest.mark.parametrize("listed", [True, False])
def test_a_gpu_node_whose_nvidia_smi_fails_does_not_smoke_on_the_cpu(listed, data, node, tmp_path):
    """SMOKE=1 on a machine with NVIDIA device files (GPU_DEVICE_FILES) whose nvidia-smi lists no GPU refuses; without
    them it runs on the CPU platform and says so."""
    devices = tmp_path / "nvidia0"
    if listed:
        devices.write_text("")
    spec = fake_gpus.write_spec(tmp_path / "gpus.json", n=0)
    ran = node("aime_qwen", **data_env("aime_qwen", data), SMOKE="1", DRY_RUN="args", FAKE_GPUS=str(spec),
               GPU_DEVICE_FILES=str(tmp_path / "nvidia[0-9]*"))
    if listed:
        assert ran.rc == 2 and ran.out == []
        assert last_line(ran.err) == (
            f"recipe: SMOKE=1 on a GPU node ({devices}) whose nvidia-smi lists no GPU: the smoke would run on the CPU; "
            "fix the driver or PATH, or set PLATFORM=cpu to smoke on the CPU"
        )
    else:
        assert ran.rc == 0, ran.err[-2000:]
        assert (f"platform: cpu (SMOKE=1 on a machine without NVIDIA GPUs: no nvidia-smi lists one, no "
                f"{tmp_path}/nvidia[0-9]*)") in ran.err.splitlines()
        assert "trainer.n_gpus_per_node=1" in ran.out
