"""The node plan of a GPU recipe, and what it refuses before anything starts.

A paper recipe (`verl_bot.recipes.launch`) asks `plan_node` which GPUs of this node train and which serve the judges
the recipe starts itself, then, before the judges, the reward server or Ray start, checks (`LaunchCheck`) the split
of every mini-batch, each GPU's free memory, the GPUs of judges given by URL and the checkpoint disk; each refusal is
one line (`VerlBotConfigError`) the recipe prints as `recipe: <line>` before it exits with 2. Without nvidia-smi a
`DRY_RUN` plans for the recipes' node (`ASSUMED_NODE`). The functions are pure; nvidia-smi, the processes behind a
judge's port and the disk are read at the edges (`query_gpus`, `judge_url_gpus`, `disk_state`, `plan_node`). The
plan and the checks: docs/recipes.md, section Node plan; the messages: docs/troubleshooting.md.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from verl_bot.errors import VerlBotConfigError
from verl_bot_contract.loopback import is_loopback

MIB = 2**20
GIB = 2**30
ASSUMED_NODE = 8  # GPUs of the node the recipes are written for (a DRY_RUN without nvidia-smi plans for it)
ASSUMED_TOTAL_MIB = 81559  # an 80 GB H100 or A100 as nvidia-smi reports it
# A verl FSDP checkpoint (save_contents model, optimizer, extra) holds the fp32 weights (4 bytes a parameter) and
# Adam's two fp32 moments (8): 12 bytes a parameter (verl 0.9.1 trains in fp32: model_dtype).
CKPT_BYTES_PER_PARAM = 12
# The actor's fp32 weights, sharded over the trainer's ranks, are on each GPU when vLLM starts and asks its share
# (unless FSDP offloads them: the recipes' OFFLOAD=True).
SHARD_BYTES_PER_PARAM = 4
GPU_QUERY = ["--query-gpu=index,uuid,memory.total,memory.free", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it (`free_mib` None: not known, e.g. a DRY_RUN's assumed node or `[N/A]`)."""

    index: int
    uuid: str
    total_mib: int
    free_mib: int | None = None


@dataclass(frozen=True)
class Judge:
    """A judge the recipe starts: its name in messages, the knob naming its GPUs, the GPUs that knob gives."""

    name: str
    var: str
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Request:
    """What the plan must fit. `rollouts`: a step's rollouts of the full run (the plan's basis; a smoke plans the
    full run's node); `run_rollouts` / `run_mini`: a step's and a mini-batch's rollouts of this launch; `what`:
    how the run's batch reads in a message ("16 prompts x 8")."""

    rollouts: int
    run_rollouts: int
    run_mini: int
    what: str
    nnodes: int = 1
    tp: int = 1
    min_per_engine: int = 16
    ngpus: int | None = None
    train_gpus: tuple[int, ...] = ()
    judges: tuple[Judge, ...] = ()
    judge_tp: int = 1


@dataclass(frozen=True)
class Plan:
    """The trainer's GPUs, each judge's (by its knob), the GPUs left idle."""

    train: tuple[int, ...]
    judges: dict[str, tuple[int, ...]] = field(default_factory=dict)
    idle: tuple[int, ...] = ()


def gpu_list(text: str) -> tuple[int, ...]:
    """"0,1, 2" -> (0, 1, 2); "" -> ()."""
    try:
        return tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise VerlBotConfigError(
            f"a GPU list must be indices separated by commas (nvidia-smi's), got {text!r}"
        ) from None


def joined(gpus: Iterable[int]) -> str:
    return ",".join(str(g) for g in gpus)


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs of `nvidia-smi --query-gpu=index,uuid,memory.total,memory.free --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        free = int(float(cells[3])) if cells[3].replace(".", "", 1).isdigit() else None
        total = int(float(cells[2])) if cells[2].replace(".", "", 1).isdigit() else 0
        gpus.append(Gpu(int(cells[0]), cells[1], total, free))
    return gpus


def parse_apps(text: str) -> dict[int, str]:
    """pid -> GPU uuid, from `nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader`."""
    apps = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 2 and cells[0].isdigit():
            apps[int(cells[0])] = cells[1]
    return apps


def visible(gpus: list[Gpu], cuda_visible: str | None) -> list[Gpu]:
    """The GPUs `CUDA_VISIBLE_DEVICES` shows (nvidia-smi indices or GPU UUIDs; unset: all), in its order."""
    if cuda_visible is None:
        return list(gpus)
    if not cuda_visible.strip():
        raise VerlBotConfigError(
            f"CUDA_VISIBLE_DEVICES is set but empty: CUDA sees none of this node's {len(gpus)} GPU(s); unset it "
            "(the recipe picks the GPUs: TRAIN_GPUS, JUDGE_GPUS)"
        )
    by_name = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    shown = []
    for name in (part.strip() for part in cuda_visible.split(",")):
        if name not in by_name:
            raise VerlBotConfigError(
                f"CUDA_VISIBLE_DEVICES={cuda_visible} names {name}, which is no GPU of this node "
                f"(nvidia-smi: {joined(g.index for g in gpus)}); name GPUs by nvidia-smi's index or UUID"
            )
        shown.append(by_name[name])
    return shown


def count_problem(d: int, request: Request) -> str | None:
    """Why `d` trainer GPUs a node cannot run this launch's batch without padding (None: they can)."""
    ranks = d * request.nnodes
    if d % request.tp:
        return f"ROLLOUT_TP={request.tp} does not divide the {d} trainer GPUs of a node (vLLM's replicas)"
    if request.run_mini % ranks:
        return (
            f"{d} trainer GPU(s) x {request.nnodes} node(s) do not divide the {request.run_mini} rollouts of a "
            f"mini-batch ({request.what}): verl would pad every step to {math.lcm(ranks, request.run_mini)} rows "
            f"with synthetic ones; use a GPU count that divides {request.run_mini} (NGPUS_PER_NODE or TRAIN_GPUS), "
            "or change TRAIN_BATCH_SIZE"
        )
    return None


def default_count(available: int, request: Request) -> int:
    """The most trainer GPUs a node (at most `available`) that run the batch without padding and leave each vLLM
    engine `min_per_engine` of a step's rollouts; 0 when none does."""
    for d in range(available, 0, -1):
        engines = d * request.nnodes // request.tp
        if count_problem(d, request) is None and (d == request.tp or request.rollouts >= request.min_per_engine
                                                  * engines):
            return d
    return 0


def _explicit_train(request: Request, free: list[int], busy: Mapping[int, str], available: int) -> tuple[int, ...]:
    """The trainer's GPUs named by TRAIN_GPUS, or the first NGPUS_PER_NODE of `free`."""
    if request.train_gpus:
        if request.ngpus is not None and request.ngpus != len(request.train_gpus):
            raise VerlBotConfigError(
                f"NGPUS_PER_NODE={request.ngpus} but TRAIN_GPUS={joined(request.train_gpus)} names "
                f"{len(request.train_gpus)}; set one of them"
            )
        for g in request.train_gpus:
            if g in busy:
                raise VerlBotConfigError(
                    f"{busy[g]} is served from GPU {g}, which the trainer needs (TRAIN_GPUS="
                    f"{joined(request.train_gpus)}): give the trainer other GPUs, or let the recipe start and place "
                    "the judge (unset the URL; START_JUDGE=1 with JUDGE_MODEL_PATH)"
                )
        return request.train_gpus
    assert request.ngpus is not None
    if request.ngpus > available:
        taken = [f"{holder} (GPU {g})" for g, holder in busy.items()]
        raise VerlBotConfigError(
            f"NGPUS_PER_NODE={request.ngpus} but this node has {available} GPU(s) for the trainer"
            + (f", the others serving {'; '.join(taken)}" if taken else "")
            + ": lower NGPUS_PER_NODE"
            + (", or serve the judges elsewhere" if taken else "")
        )
    return tuple(free[: request.ngpus])


def make_plan(gpus: list[int], request: Request, busy: Mapping[int, str] | None = None) -> Plan:
    """The node plan over the visible GPUs `gpus` (in order); `busy`: GPU -> what serves a judge there (never the
    trainer's, never a started judge's)."""
    busy = busy or {}
    unknown = [g for g in (*request.train_gpus, *(g for j in request.judges for g in j.gpus)) if g not in gpus]
    if unknown:
        raise VerlBotConfigError(f"GPU {unknown[0]} is named for the run but not visible here (GPUs {joined(gpus)})")
    pinned = [g for j in request.judges for g in j.gpus]
    free = [g for g in gpus if g not in busy and g not in pinned]
    shared = sorted(set(request.train_gpus) & set(pinned))
    if shared:
        raise VerlBotConfigError(
            f"GPU {shared[0]} is named for the trainer (TRAIN_GPUS) and for a judge; name each GPU once"
        )
    unplaced = [j for j in request.judges if not j.gpus]
    available = len(free) - len(unplaced) * request.judge_tp
    if request.train_gpus or request.ngpus is not None:
        train = _explicit_train(request, free, busy, len(free))
    else:
        d = default_count(available, request)
        if d == 0:
            raise VerlBotConfigError(
                f"no trainer GPU count fits this node: {max(available, 0)} GPU(s) left for the trainer "
                f"(of {len(gpus)} visible, {len(gpus) - len(free)} serving judges, {len(unplaced)} judge(s) to "
                f"place) for {request.rollouts} rollouts a step ({request.what}); set NGPUS_PER_NODE or TRAIN_GPUS"
            )
        train = tuple(free[:d])
    problem = count_problem(len(train), request)
    if problem:
        raise VerlBotConfigError(problem)
    rest = [g for g in free if g not in train]
    judges = {j.var: j.gpus for j in request.judges if j.gpus} | _split(rest, unplaced, request.judge_tp, len(train))
    placed = {g for gs in judges.values() for g in gs}
    return Plan(train, judges, tuple(g for g in rest if g not in placed))


def _split(rest: list[int], judges: list[Judge], tp: int, trained: int) -> dict[str, tuple[int, ...]]:
    """The GPUs the trainer leaves, shared by the judges in order (the first one takes the remainder), each a
    multiple of `tp`."""
    if not judges:
        return {}
    share = len(rest) // len(judges) // tp * tp
    if share == 0:
        raise VerlBotConfigError(
            f"START_JUDGE=1 starts {len(judges)} judge(s) ({', '.join(j.name for j in judges)}, JUDGE_TP={tp} GPU(s) "
            f"each) but the trainer's {trained} GPU(s) leave {len(rest)}: lower NGPUS_PER_NODE, name the judges' "
            "GPUs (JUDGE_GPUS, VLM_JUDGE_GPUS), or pass the judges' URLs"
        )
    first = (len(rest) - share * (len(judges) - 1)) // tp * tp
    out, start = {}, 0
    for i, judge in enumerate(judges):
        size = first if i == 0 else share
        out[judge.var] = tuple(rest[start : start + size])
        start += size
    return out


@dataclass(frozen=True)
class Role:
    """What runs on a GPU of the plan: its name in messages, vLLM's `gpu_memory_utilization` there, and the MiB
    already on the GPU when vLLM starts (the trainer's share of the actor's weights)."""

    name: str
    share: float
    extra_mib: float = 0.0

    def need_mib(self, total_mib: int) -> float:
        """vLLM refuses to start when less than share x total is free (vLLM 0.24.0 `request_memory`)."""
        return self.share * total_mib + self.extra_mib


def holders_of(apps: Mapping[int, str], gpus: Iterable[Gpu]) -> dict[int, list[int]]:
    """GPU -> the pids nvidia-smi shows on it (`apps`: pid -> GPU uuid)."""
    index = {g.uuid: g.index for g in gpus}
    out: dict[int, list[int]] = {}
    for pid, uuid in sorted(apps.items()):
        if uuid in index:
            out.setdefault(index[uuid], []).append(pid)
    return out


def memory_problem(plan: Plan, gpus: Mapping[int, Gpu], roles: Mapping[str, Role],
                   holders: Mapping[int, list[int]] | None = None) -> str | None:
    """The first GPU of `plan` whose free memory is below what runs there asks. `roles`: "trainer" and each judge's
    knob -> its `Role`; `holders`: GPU -> the pids nvidia-smi shows on it."""
    holders = holders or {}
    for key, placed in (("trainer", plan.train), *plan.judges.items()):
        role = roles[key]
        for g in placed:
            gpu = gpus[g]
            need = role.need_mib(gpu.total_mib)
            if gpu.free_mib is None or gpu.free_mib >= need:
                continue
            room = [i for i, other in gpus.items() if other.free_mib is not None and other.free_mib >= need]
            who = f"; held by pid {', '.join(map(str, holders[g]))} (nvidia-smi)" if holders.get(g) else ""
            extra = f" + {role.extra_mib / 1024:.1f} GiB of the actor's weights" if role.extra_mib else ""
            return (
                f"GPU {g} has {gpu.free_mib / 1024:.1f} GiB free of {gpu.total_mib / 1024:.1f} GiB, below the "
                f"{need / 1024:.1f} GiB the {role.name} asks there ({role.share:g} x {gpu.total_mib / 1024:.1f} GiB"
                f"{extra}){who}: free it, or give the run other GPUs (TRAIN_GPUS, JUDGE_GPUS; with room: "
                f"{joined(room) or 'none'})"
            )
    return None


def param_count(hf_config: Mapping) -> int | None:
    """Parameters of a dense (or mixture-of-experts) decoder from its config.json: embeddings (twice unless tied),
    attention and gated MLP of every layer; None when the config lacks the sizes."""
    text = hf_config.get("text_config") or hf_config
    sizes = [text.get(k) for k in ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size")]
    if not all(isinstance(s, int) and s > 0 for s in sizes):
        return None
    hidden, layers, vocab, inter = sizes
    heads = int(text.get("num_attention_heads") or 1)
    head_dim = int(text.get("head_dim") or hidden // heads)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    experts = int(text.get("num_local_experts") or text.get("num_experts") or 1)
    mlp = 3 * hidden * int(text.get("moe_intermediate_size") or inter) * experts
    tied = bool(hf_config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    return vocab * hidden * (1 if tied else 2) + layers * (attention + mlp)


def saves_of(total_steps: int, save_freq: int) -> int:
    """Checkpoints a run of `total_steps` writes: every `save_freq` steps and at the last step (verl's `fit`)."""
    return 0 if save_freq <= 0 else math.ceil(total_steps / save_freq)


def kept_at_once(keep: int, saves: int, resumed: bool = False) -> int:
    """Checkpoints on the disk at once. verl 0.9.1 removes the oldest of its own before a save when it keeps >= 2,
    after the new one is written when it keeps 1 (so 2 while it writes), none when it keeps all (0); a resumed run's
    earlier checkpoints, which verl does not count, verl-bot removes after each save
    (`verl_bot.hooks.checkpoint_retention`): one more while a save is written."""
    if keep <= 0:
        return saves
    return min(saves, max(keep, 2)) + (1 if resumed and keep >= 2 and saves else 0)


def disk_problem(ckpt_dir: str, free_bytes: int, existing_bytes: int, params: int, keep: int, saves: int) -> str | None:
    """Why the disk of `ckpt_dir` (`free_bytes` free; `existing_bytes` in this run's earlier checkpoints, which
    retention replaces unless it keeps all) cannot hold the run's checkpoints, or None."""
    size = params * CKPT_BYTES_PER_PARAM
    n = kept_at_once(keep, saves, existing_bytes > 0)
    need = saves * size if keep <= 0 else n * size - existing_bytes
    if free_bytes >= need:
        return None
    there = f", less the {existing_bytes / GIB:.1f} GiB of its earlier ones" if existing_bytes and keep > 0 else ""
    return (
        f"CKPT_DIR={ckpt_dir} is on a disk with {free_bytes / GIB:.1f} GiB free, below the {need / GIB:.1f} GiB the "
        f"run's checkpoints take: {n} of {size / GIB:.1f} GiB at once{there} (KEEP_CKPTS={keep}, {saves} save(s); "
        f"{params / 1e9:.2f}B parameters x {CKPT_BYTES_PER_PARAM} bytes: fp32 weights and Adam's moments); point "
        "CKPT_DIR at a disk with room"
    )


def loopback_problem(nnodes: int, urls: Mapping[str, str]) -> str | None:
    """With several nodes, the first of `urls` (what -> URL) on a loopback address, or None."""
    if nnodes <= 1:
        return None
    for what, spec in urls.items():
        for url in (u.strip() for u in spec.split(",") if u.strip()):
            if is_loopback(urlparse(url).hostname or ""):
                return (
                    f"NNODES={nnodes} and {what} is at {url}, a loopback address the other nodes cannot reach; use "
                    "an address every node reaches (REWARD_HOST for the reward server the recipe starts)"
                )
    return None


def multinode_judge_problem(nnodes: int, starts_judges: bool) -> str | None:
    """With several nodes the recipe does not start judges: the trainer's Ray cluster, started before it, may hold
    every GPU of this node."""
    if nnodes > 1 and starts_judges:
        return (
            f"NNODES={nnodes} with START_JUDGE=1: the Ray cluster of a multi-node run is started before the recipe "
            "and may hold every GPU of this node; serve the judges outside it and pass their URLs "
            "(LLM_JUDGE_BASE_URL, VLM_JUDGE_BASE_URL, STEP_JUDGE_BASE_URL)"
        )
    return None


def node_address() -> str:
    """This node's address as the other nodes see it: the source address of a route outwards (no packet is sent),
    else the host name's."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.254.254.254", 1))
            return s.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


# --- the edges: nvidia-smi, the processes behind a port, the disk --------------------------------------------------
def nvidia_smi(args: list[str]) -> str | None:
    """nvidia-smi's output, or None when it is missing or fails."""
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def query_gpus() -> list[Gpu] | None:
    """This node's GPUs (None: no nvidia-smi, or it failed)."""
    text = nvidia_smi(GPU_QUERY)
    return None if text is None else parse_gpus(text)


def _local_hosts() -> set[str]:
    import psutil

    hosts = {"localhost", socket.gethostname(), socket.getfqdn()}
    for addresses in psutil.net_if_addrs().values():
        hosts.update(a.address.split("%")[0] for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    return {h.lower() for h in hosts}


def _pids_behind(port: int) -> set[int]:
    """The processes listening on `port` here and their descendants (vLLM's engines are children of its server)."""
    import psutil

    found: set[int] = set()
    try:
        listening = [c.pid for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN
                     and c.laddr and c.laddr.port == port and c.pid]
    except psutil.AccessDenied:
        return found
    for pid in listening:
        try:
            found |= {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    return found


def judge_url_gpus(urls: Mapping[str, str], gpus: list[Gpu], apps: Mapping[int, str]) -> dict[int, str]:
    """GPU -> "NAME=URL (pid N)" for each judge URL served from this node: the processes behind its port that
    nvidia-smi shows on a GPU (`apps`: pid -> GPU uuid)."""
    if not urls or not apps:
        return {}
    local = _local_hosts()
    gpu_of = {pid: g for g, pids in holders_of(apps, gpus).items() for pid in pids}
    busy: dict[int, str] = {}
    for name, url in urls.items():
        parsed = urlparse(url)
        if not (is_loopback(parsed.hostname or "") or (parsed.hostname or "").lower() in local):
            continue
        for pid in sorted(_pids_behind(parsed.port or (443 if parsed.scheme == "https" else 80)) & gpu_of.keys()):
            busy.setdefault(gpu_of[pid], f"{name}={url} (pid {pid})")
    return busy


def disk_state(ckpt_dir: str) -> tuple[int, int]:
    """(free bytes on the disk of `ckpt_dir` or its nearest existing parent, bytes of its global_step_* folders)."""
    path = Path(ckpt_dir).expanduser().absolute()
    existing = sum(f.stat().st_size for f in path.glob("global_step_*/**/*") if f.is_file()) if path.is_dir() else 0
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free, existing


# --- a recipe's plan ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchCheck:
    """What a launch checks beyond the GPU count: vLLM's memory share on the trainer's GPUs (`util`, plus the actor's
    weights of `params` parameters unless `offload`) and on the judges' (`judge_util`), the checkpoints (`keep` of a
    run of `total_steps` saving every `save_freq` in `ckpt_dir`), and the URLs (what -> URL, comma-separated for
    several) of the reward servers and of the judges given by URL (traced to the GPUs their processes hold)."""

    util: float
    judge_util: float
    offload: bool
    params: int | None
    ckpt_dir: str
    keep: int
    total_steps: int
    save_freq: int
    reward_urls: Mapping[str, str] = field(default_factory=dict)
    judge_urls: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodePlan:
    """The plan and its one line (the recipe prints it, the smoke's verdict names it)."""

    plan: Plan
    summary: str


def inventory(check: bool) -> tuple[list[Gpu], str]:
    """The visible GPUs and how they were found; a DRY_RUN without nvidia-smi assumes the recipes' node."""
    gpus = query_gpus()
    if not gpus:
        if check:
            raise VerlBotConfigError("nvidia-smi lists no GPU on this node (a driver or container problem?)")
        return [Gpu(i, f"GPU-assumed-{i}", ASSUMED_TOTAL_MIB) for i in range(ASSUMED_NODE)], (
            f" (assumed: {ASSUMED_NODE} GPUs of 80 GB, no nvidia-smi here)")
    return visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES")), ""


def model_params(model: str, params: str = "") -> int | None:
    """MODEL_PARAMS (`params`), or the count from the model's config.json (None when it cannot be read here)."""
    if params:
        try:
            return int(float(params))
        except ValueError:
            raise VerlBotConfigError(f"MODEL_PARAMS must be a number of parameters, got {params!r}") from None
    from verl_bot.launch.families import read_hf_config

    hf_config = read_hf_config(model) if model else None
    return param_count(hf_config) if hf_config else None


def check_launch(request: Request, check: LaunchCheck, plan: Plan, gpus: list[Gpu], apps: Mapping[int, str]) -> str:
    """The memory and disk checks of a launch (raise their one line); returns the disk's part of the summary."""
    params = check.params
    shard = 0.0 if check.offload else (params or 0) * SHARD_BYTES_PER_PARAM / (len(plan.train) * request.nnodes) / MIB
    roles = {"trainer": Role("trainer", check.util, shard)} | {j.var: Role(j.name, check.judge_util)
                                                                for j in request.judges}
    problem = memory_problem(plan, {g.index: g for g in gpus}, roles, holders_of(apps, gpus))
    if problem:
        raise VerlBotConfigError(problem)
    saves = saves_of(check.total_steps, check.save_freq)
    if not check.ckpt_dir or saves == 0:
        return ""
    if params is None:
        return f"; checkpoints in {check.ckpt_dir} (size unknown: set MODEL_PARAMS to check the disk)"
    free, existing = disk_state(check.ckpt_dir)
    problem = disk_problem(check.ckpt_dir, free, existing, params, check.keep, saves)
    if problem:
        raise VerlBotConfigError(problem)
    size = params * CKPT_BYTES_PER_PARAM / GIB
    return (f"; checkpoints: {kept_at_once(check.keep, saves, existing > 0)} at once of {size:.1f} GiB in "
            f"{check.ckpt_dir} ({free / GIB:.0f} GiB free)")


def summary(plan: Plan, request: Request, gpus: list[Gpu]) -> str:
    """The plan in one line."""
    gib = {g.index: g.total_mib / 1024 for g in gpus}
    engines = len(plan.train) * request.nnodes // request.tp
    parts = [f"trainer GPUs {joined(plan.train)} ({len(plan.train)} x {gib[plan.train[0]]:.0f} GiB"
             + (f" x {request.nnodes} nodes" if request.nnodes > 1 else "")
             + f"; {request.rollouts // engines} rollouts per vLLM engine a step)"]
    names = {j.var: j.name for j in request.judges}
    parts += [f"{names[var]} GPUs {joined(gs)}" for var, gs in plan.judges.items()]
    parts.append(f"idle GPUs {joined(plan.idle)}" if plan.idle else "no GPU idle")
    return ", ".join(parts)


def plan_node(request: Request, check: LaunchCheck | None = None) -> NodePlan:
    """This node's plan for `request` (a dry run: the GPU count only); with `check` (a launch) also the addresses on
    several nodes, the GPUs of the judges given by URL, each GPU's free memory and the checkpoint disk. Raises
    `VerlBotConfigError` with the one line of what cannot run."""
    gpus, assumed = inventory(check is not None)
    apps: dict[int, str] = {}
    busy: dict[int, str] = {}
    if check is not None:
        urls = {**check.reward_urls, **check.judge_urls}
        problem = (loopback_problem(request.nnodes, urls)
                   or multinode_judge_problem(request.nnodes, bool(request.judges)))
        if problem:
            raise VerlBotConfigError(problem)
        apps = parse_apps(nvidia_smi(APPS_QUERY) or "")
        busy = judge_url_gpus(check.judge_urls, gpus, apps)
    plan = make_plan([g.index for g in gpus], request, busy)
    tail = check_launch(request, check, plan, gpus, apps) if check is not None else ""
    return NodePlan(plan, f"{summary(plan, request, gpus)}{tail}{assumed}")
