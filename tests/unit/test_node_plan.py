"""The node plan of the GPU recipes (verl_bot/launch/node_plan.py) and the check that every node reaches the run's URLs
(verl_bot/launch/reach.py, verl_bot/hooks/node_reach.py).

The plan's pure functions on the recipes' batches (what each recipe's plan is on 8 idle 80 GB GPUs, on 7, with a
judge on a GPU, with counts verl would pad); the edges on real things: nvidia-smi's text from the fake of
tests/fake_gpus.py, the processes behind a real listening port (a parent that listens and a child that holds the
GPU, as vLLM's server and engine), the real disk; the per-node check with a real Ray cluster (one node) against a URL
that answers and one that does not, and the hook's gate; the checkpoints a resumed run keeps
(verl_bot/hooks/checkpoint_retention.py). The recipes' use of it: tests/component/test_recipes.py.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests import fake_gpus
from tests.conftest import compose_verl_config, free_port
from verl_bot.errors import VerlBotConfigError
from verl_bot.launch import node_plan as np_
from verl_bot.launch.node_plan import Gpu, Judge, Plan, Request, Role

LLM = Judge("LLM judge", "JUDGE_GPUS")
VLM = Judge("VLM judge", "VLM_JUDGE_GPUS")
STEP = Judge("step judge", "JUDGE_GPUS")


def request(rollouts: int = 128, mini: int | None = None, **kw) -> Request:
    """A full run's request: React's 16 prompts x 8 (AIME: 64), its mini-batch the whole step unless `mini`."""
    mini = rollouts if mini is None else mini
    return Request(rollouts=rollouts, run_rollouts=rollouts, run_mini=mini, what=f"{mini // 8} prompts x 8", **kw)


# The paper's recipes on the node they are written for: 8 idle GPUs.
@pytest.mark.parametrize(
    "req, train, judges, idle",
    [
        (request(128, judges=(LLM,)), (0, 1, 2, 3), {"JUDGE_GPUS": (4, 5, 6, 7)}, ()),  # React, judge started here
        (request(128, judges=(LLM, VLM)), (0, 1, 2, 3), {"JUDGE_GPUS": (4, 5), "VLM_JUDGE_GPUS": (6, 7)}, ()),
        (request(128), (0, 1, 2, 3, 4, 5, 6, 7), {}, ()),  # React, judges given by URL: 16 rollouts per engine
        (request(64, judges=(STEP,)), (0, 1, 2, 3), {"JUDGE_GPUS": (4, 5, 6, 7)}, ()),  # AIME bot / pure / pass
        (request(64), (0, 1, 2, 3), {}, (4, 5, 6, 7)),  # AIME grpo: 8 engines would decode 8 rollouts each
        (request(64, mini=16), (0, 1, 2, 3), {}, (4, 5, 6, 7)),  # AIME reco: 4 mini-batches of 2 prompts
        (request(128, tp=2, judges=(LLM,)), (0, 1, 2, 3), {"JUDGE_GPUS": (4, 5, 6, 7)}, ()),
        (request(128, judges=(LLM,), judge_tp=2), (0, 1, 2, 3), {"JUDGE_GPUS": (4, 5, 6, 7)}, ()),
    ],
)
def test_the_default_plan_of_an_idle_8_gpu_node(req, train, judges, idle):
    assert np_.make_plan(list(range(8)), req) == Plan(train, judges, idle)


def test_7_gpus_train_on_4_and_the_judge_takes_the_rest():
    """verl would pad 128 rollouts on 7 or 6 ranks to lcm(7, 128) = 896 rows: the plan takes 4."""
    assert np_.make_plan(list(range(7)), request(128, judges=(LLM,))) == Plan((0, 1, 2, 3), {"JUDGE_GPUS": (4, 5, 6)})
    assert np_.make_plan([2, 3, 5], request(128, judges=(LLM,))) == Plan((2, 3), {"JUDGE_GPUS": (5,)})


def test_the_plan_never_takes_a_gpu_serving_a_judge_given_by_url():
    busy = {0: "LLM_JUDGE_BASE_URL=http://127.0.0.1:8000/v1 (pid 42)"}
    assert np_.make_plan(list(range(8)), request(128), busy) == Plan((1, 2, 3, 4), {}, (5, 6, 7))
    with pytest.raises(VerlBotConfigError) as err:
        np_.make_plan(list(range(8)), request(128, train_gpus=(0, 1, 2, 3)), busy)
    assert str(err.value) == (
        "LLM_JUDGE_BASE_URL=http://127.0.0.1:8000/v1 (pid 42) is served from GPU 0, which the trainer needs "
        "(TRAIN_GPUS=0,1,2,3): give the trainer other GPUs, or let the recipe start and place the judge (unset the "
        "URL; START_JUDGE=1 with JUDGE_MODEL_PATH)"
    )
    with pytest.raises(VerlBotConfigError, match=r"^NGPUS_PER_NODE=8 but this node has 7 GPU\(s\) for the trainer, "
                       r"the others serving LLM_JUDGE_BASE_URL=http://127.0.0.1:8000/v1 \(pid 42\) \(GPU 0\)"):
        np_.make_plan(list(range(8)), request(128, ngpus=8), busy)


@pytest.mark.parametrize(
    "req, message",
    [
        (request(128, ngpus=6), "6 trainer GPU(s) x 1 node(s) do not divide the 128 rollouts of a mini-batch (16 "
         "prompts x 8): verl would pad every step to 384 rows with synthetic ones; use a GPU count that divides 128 "
         "(NGPUS_PER_NODE or TRAIN_GPUS), or change TRAIN_BATCH_SIZE"),
        (request(128, ngpus=7), "7 trainer GPU(s) x 1 node(s) do not divide the 128 rollouts of a mini-batch (16 "
         "prompts x 8): verl would pad every step to 896 rows"),
        (request(64, mini=16, ngpus=4, nnodes=8), "4 trainer GPU(s) x 8 node(s) do not divide the 16 rollouts"),
        (request(128, ngpus=6, tp=4), "ROLLOUT_TP=4 does not divide the 6 trainer GPUs of a node (vLLM's replicas)"),
        (request(128, ngpus=9999), "NGPUS_PER_NODE=9999 but this node has 8 GPU(s) for the trainer: lower "
         "NGPUS_PER_NODE"),
        (request(128, ngpus=8, judges=(LLM,)), "START_JUDGE=1 starts 1 judge(s) (LLM judge, JUDGE_TP=1 GPU(s) each) "
         "but the trainer's 8 GPU(s) leave 0: lower NGPUS_PER_NODE, name the judges' GPUs (JUDGE_GPUS, "
         "VLM_JUDGE_GPUS), or pass the judges' URLs"),
        (request(128, train_gpus=(0, 1), ngpus=4), "NGPUS_PER_NODE=4 but TRAIN_GPUS=0,1 names 2; set one of them"),
        (request(128, train_gpus=(0, 9)), "GPU 9 is named for the run but not visible here (GPUs 0,1,2,3,4,5,6,7)"),
        (request(128, train_gpus=(0, 1), judges=(Judge("LLM judge", "JUDGE_GPUS", (1,)),)),
         "GPU 1 is named for the trainer (TRAIN_GPUS) and for a judge; name each GPU once"),
    ],
)
def test_a_plan_that_cannot_run_is_one_line(req, message):
    with pytest.raises(VerlBotConfigError) as err:
        np_.make_plan(list(range(8)), req)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_named_gpus_are_the_runs():
    req = request(128, train_gpus=(4, 5, 6, 7), judges=(Judge("LLM judge", "JUDGE_GPUS", (0, 1)),))
    assert np_.make_plan(list(range(8)), req) == Plan((4, 5, 6, 7), {"JUDGE_GPUS": (0, 1)}, (2, 3))
    assert np_.make_plan(list(range(8)), request(128, ngpus=2, judges=(LLM,))) == Plan((0, 1), {"JUDGE_GPUS": (2, 3, 4,
                                                                                                            5, 6, 7)})


def test_the_smoke_plans_the_full_runs_node_and_checks_its_own_batch():
    """SMOKE=1 runs 4 prompts x 8 on the full run's 4 GPUs; ReCo's smoke has mini-batches of 1 prompt x 8."""
    smoke = Request(rollouts=128, run_rollouts=32, run_mini=8, what="1 prompts x 8", judges=(LLM,))
    assert np_.make_plan(list(range(8)), smoke).train == (0, 1, 2, 3)
    odd = Request(rollouts=128, run_rollouts=12, run_mini=12, what="3 prompts x 4")  # SMOKE_BATCH=3 ROLLOUT_N=4
    assert np_.make_plan(list(range(8)), odd).train == (0, 1, 2, 3, 4, 5)  # the most GPUs its batch splits over
    with pytest.raises(VerlBotConfigError, match=r"^8 trainer GPU\(s\) x 1 node\(s\) do not divide the 12 rollouts"):
        np_.make_plan(list(range(8)), Request(rollouts=128, run_rollouts=12, run_mini=12, what="3 prompts x 4",
                                              ngpus=8))


NVIDIA_SMI_GPUS = """0, GPU-aaa, 81559, 81004
1, GPU-bbb, 81559, 8112
2, GPU-ccc, 81559, [N/A]
"""


def test_nvidia_smis_lists_are_read():
    assert np_.parse_gpus(NVIDIA_SMI_GPUS) == [Gpu(0, "GPU-aaa", 81559, 81004), Gpu(1, "GPU-bbb", 81559, 8112),
                                               Gpu(2, "GPU-ccc", 81559, None)]
    assert np_.parse_apps("1234, GPU-bbb\n5678, GPU-aaa\nNo running processes found\n") == {1234: "GPU-bbb",
                                                                                             5678: "GPU-aaa"}


def test_cuda_visible_devices_narrows_the_node():
    gpus = np_.parse_gpus(NVIDIA_SMI_GPUS)
    assert np_.visible(gpus, None) == gpus
    assert [g.index for g in np_.visible(gpus, "2,0")] == [2, 0]
    assert [g.index for g in np_.visible(gpus, "GPU-bbb")] == [1]
    with pytest.raises(VerlBotConfigError, match=r"^CUDA_VISIBLE_DEVICES is set but empty: CUDA sees none of this "
                       r"node's 3 GPU\(s\); unset it"):
        np_.visible(gpus, "")
    with pytest.raises(VerlBotConfigError, match=r"^CUDA_VISIBLE_DEVICES=0,7 names 7, which is no GPU of this node"):
        np_.visible(gpus, "0,7")


def test_a_gpu_short_of_free_memory_is_named_with_its_holder_and_the_gpus_with_room():
    gpus = {g.index: g for g in np_.parse_gpus(NVIDIA_SMI_GPUS)}
    plan = Plan((0, 1), {"JUDGE_GPUS": (2,)})
    roles = {"trainer": Role("trainer", 0.6, 2947.0), "JUDGE_GPUS": Role("LLM judge", 0.9)}
    assert np_.memory_problem(plan, gpus, roles, {1: [4242]}) == (
        "GPU 1 has 7.9 GiB free of 79.6 GiB, below the 50.7 GiB the trainer asks there (0.6 x 79.6 GiB + 2.9 GiB of "
        "the actor's weights); held by pid 4242 (nvidia-smi): free it, or give the run other GPUs (TRAIN_GPUS, "
        "JUDGE_GPUS; with room: 0)"
    )
    assert np_.memory_problem(Plan((0,), {"JUDGE_GPUS": (2,)}), gpus, roles) is None  # [N/A]: not known, not refused
    tight = {0: Gpu(0, "GPU-aaa", 81559, 70000)}
    assert np_.memory_problem(Plan((), {"JUDGE_GPUS": (0,)}), tight, roles).startswith(
        "GPU 0 has 68.4 GiB free of 79.6 GiB, below the 71.7 GiB the LLM judge asks there (0.9 x 79.6 GiB)")


# config.json sizes of the recipes' models (their model cards: 3.09B, 3.08B, 3.84B parameters)
QWEN25_3B = {"hidden_size": 2048, "num_hidden_layers": 36, "vocab_size": 151936, "intermediate_size": 11008,
             "num_attention_heads": 16, "num_key_value_heads": 2, "tie_word_embeddings": True}
SMOLLM3_3B = {"hidden_size": 2048, "num_hidden_layers": 36, "vocab_size": 128256, "intermediate_size": 11008,
              "num_attention_heads": 16, "num_key_value_heads": 4, "tie_word_embeddings": True}
PHI4_MINI = {"hidden_size": 3072, "num_hidden_layers": 32, "vocab_size": 200064, "intermediate_size": 8192,
             "num_attention_heads": 24, "num_key_value_heads": 8, "tie_word_embeddings": True}


@pytest.mark.parametrize("config, billions", [(QWEN25_3B, 3.09), (SMOLLM3_3B, 3.08), (PHI4_MINI, 3.84)])
def test_the_parameter_count_from_config_json(config, billions):
    assert np_.param_count(config) == pytest.approx(billions * 1e9, rel=0.01)
    assert np_.param_count({"hidden_size": 8}) is None


def test_checkpoints_on_disk_at_once_follow_verls_retention():
    """verl 0.9.1 removes the oldest before a save when it keeps >= 2, after the new one is written when it keeps 1;
    a resumed run holds one more while a save is written (verl-bot removes the earlier launches' after it)."""
    assert np_.saves_of(150, 25) == 6 and np_.saves_of(2, 2) == 1 and np_.saves_of(7, 5) == 2
    assert np_.saves_of(150, -1) == 0
    assert [np_.kept_at_once(keep, 6) for keep in (0, 1, 2, 3)] == [6, 2, 2, 3]
    assert [np_.kept_at_once(keep, 6, resumed=True) for keep in (0, 1, 2, 3)] == [6, 2, 3, 4]
    assert np_.kept_at_once(2, 1) == 1 and np_.kept_at_once(2, 0, resumed=True) == 0


def test_the_disk_check_on_a_real_disk(tmp_path):
    ckpt = tmp_path / "ckpt" / "run"
    free, existing = np_.disk_state(str(ckpt))  # not made yet: its nearest parent's disk
    assert free > 0 and existing == 0
    assert np_.disk_problem(str(ckpt), free, existing, 1000, keep=2, saves=6) is None
    too_big = free // 24 + 10**9  # two checkpoints of 12 bytes a parameter do not fit
    size = too_big * 12 / 2**30
    assert np_.disk_problem(str(ckpt), free, existing, too_big, keep=2, saves=6) == (
        f"CKPT_DIR={ckpt} is on a disk with {free / 2**30:.1f} GiB free, below the {2 * size:.1f} GiB the run's "
        f"checkpoints take: 2 of {size:.1f} GiB at once (KEEP_CKPTS=2, 6 save(s); {too_big / 1e9:.2f}B parameters x "
        "12 bytes: fp32 weights and Adam's moments); point CKPT_DIR at a disk with room"
    )
    # the run's earlier checkpoints count as room (retention replaces them), less one written beside them
    (ckpt / "global_step_25" / "actor").mkdir(parents=True)
    (ckpt / "global_step_25" / "actor" / "model.pt").write_bytes(b"x" * 4096)
    assert np_.disk_state(str(ckpt))[1] == 4096
    one = 10 * 12  # a checkpoint of 10 parameters
    assert np_.disk_problem(str(ckpt), one, 2 * one, 10, keep=2, saves=6) is None  # 3 at once, 2 there
    assert "below the 0.0 GiB the run's checkpoints take: 3 of 0.0 GiB at once, less the 0.0 GiB of its earlier" \
           in np_.disk_problem(str(ckpt), one - 1, 2 * one, 10, keep=2, saves=6)
    assert np_.disk_problem(str(ckpt), 6 * one, 100 * one, 10, keep=0, saves=6) is None  # all kept: 6 new ones
    assert np_.disk_problem(str(ckpt), 6 * one - 1, 100 * one, 10, keep=0, saves=6) is not None


@pytest.mark.parametrize("url", ["http://127.0.0.1:8801", "http://localhost:8000/v1", "http://[::1]:8801",
                                 "http://0.0.0.0:8801", "http://10.0.0.5:8801,http://127.0.0.2:8801"])
def test_a_loopback_address_is_refused_on_several_nodes(url):
    assert np_.loopback_problem(1, {"REWARD_URL": url}) is None
    problem = np_.loopback_problem(2, {"REWARD_URL": url})
    assert problem.startswith("NNODES=2 and REWARD_URL is at http://") and "a loopback address" in problem
    assert np_.loopback_problem(2, {"REWARD_URL": "http://10.0.0.5:8801", "LLM_JUDGE_BASE_URL": "http://gpu3:8000/v1"
                                    }) is None


def test_several_nodes_start_no_judge():
    assert np_.multinode_judge_problem(1, True) is None and np_.multinode_judge_problem(2, False) is None
    assert np_.multinode_judge_problem(2, True).startswith("NNODES=2 with START_JUDGE=1: the Ray cluster")


LISTENER = """
import http.server, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # as vLLM's engine core
print(child.pid, flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def test_a_judge_url_is_traced_to_the_gpu_its_process_holds():
    """A server listening on the judge's port whose child process holds GPU 3 (nvidia-smi's compute apps)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", LISTENER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(server.stdout.readline())
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        gpus = [Gpu(i, f"GPU-{i}", 81559, 81004) for i in range(4)]
        url = f"http://127.0.0.1:{port}/v1"
        assert np_.judge_url_gpus({"LLM_JUDGE_BASE_URL": url}, gpus, {child: "GPU-3", 99999999: "GPU-1"}) == {
            3: f"LLM_JUDGE_BASE_URL={url} (pid {child})"}
        assert np_.judge_url_gpus({"LLM_JUDGE_BASE_URL": url}, gpus, {99999999: "GPU-1"}) == {}
        assert np_.judge_url_gpus({"X": "http://203.0.113.9:8000/v1"}, gpus, {child: "GPU-3"}) == {}  # not here
    finally:
        for pid in (server.pid,):
            subprocess.run(["kill", str(pid)], check=False)
        server.wait(timeout=30)
        subprocess.run(["kill", str(child)], check=False)


def test_plan_node_plans_this_node_and_a_launch_checks_it_in_one_line(tmp_path, monkeypatch):
    """`plan_node` on the fake nvidia-smi's node (GPU 0 held by pid 777): a dry run's plan counts GPUs only; a launch's
    (`LaunchCheck`) also checks each GPU's free memory (the trainer's, then the judge's) and the checkpoint disk."""
    fake_gpus.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPUS", str(fake_gpus.write_spec(tmp_path / "gpus.json", free={0: 8000}, apps={777: 0})))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    req = request(128, judges=(LLM,))
    node = np_.plan_node(req)  # a plan counts GPUs only
    assert node.plan == Plan((0, 1, 2, 3), {"JUDGE_GPUS": (4, 5, 6, 7)})
    check = np_.LaunchCheck(util=0.6, judge_util=0.9, offload=False, params=3_090_000_000, ckpt_dir=str(tmp_path / "c"),
                            keep=2, total_steps=2, save_freq=2)
    with pytest.raises(VerlBotConfigError) as err:
        np_.plan_node(req, check)
    assert str(err.value) == (
        "GPU 0 has 7.8 GiB free of 79.6 GiB, below the 50.7 GiB the trainer asks there (0.6 x 79.6 GiB + 2.9 GiB of "
        "the actor's weights); held by pid 777 (nvidia-smi): free it, or give the run other GPUs (TRAIN_GPUS, "
        "JUDGE_GPUS; with room: 1,2,3,4,5,6,7)"
    )
    small = np_.LaunchCheck(util=0.6, judge_util=0.9, offload=False, params=1000, ckpt_dir=str(tmp_path / "ckpt"),
                            keep=2, total_steps=2, save_freq=2)
    moved = request(128, train_gpus=(1, 2, 3, 4), judges=(LLM,))
    with pytest.raises(VerlBotConfigError, match=r"^GPU 0 has 7\.8 GiB free of 79\.6 GiB, below the 71\.7 GiB the LLM "
                       r"judge asks there \(0\.9 x 79\.6 GiB\); held by pid 777"):
        np_.plan_node(moved, small)  # the judge would get the rest, GPU 0 among them
    pinned = request(128, train_gpus=(1, 2, 3, 4), judges=(Judge("LLM judge", "JUDGE_GPUS", (5, 6, 7)),))
    node = np_.plan_node(pinned, small)
    assert node.plan == Plan((1, 2, 3, 4), {"JUDGE_GPUS": (5, 6, 7)}, (0,))
    assert node.summary == (
        "trainer GPUs 1,2,3,4 (4 x 80 GiB; 32 rollouts per vLLM engine a step), LLM judge GPUs 5,6,7, "
        f"idle GPUs 0; checkpoints: 1 at once of 0.0 GiB in {tmp_path / 'ckpt'} "
        f"({np_.disk_state(str(tmp_path))[0] / 2**30:.0f} GiB free)"
    )


def test_model_params_is_the_setting_or_the_models_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
                                                      "intermediate_size": 128, "num_attention_heads": 4}))
    assert np_.model_params(str(tmp_path), "3.09e9") == 3_090_000_000
    # by hand: embeddings 100 x 64 twice (untied), 2 layers of attention 4 x 64 x 64 and gated MLP 3 x 64 x 128
    assert np_.model_params(str(tmp_path)) == 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128) == 94720
    assert np_.model_params(str(tmp_path / "none")) is None
    with pytest.raises(VerlBotConfigError, match=r"^MODEL_PARAMS must be a number of parameters, got '3B'$"):
        np_.model_params(str(tmp_path), "3B")


# --- every node reaches the run's URLs (real Ray, one node) ---------------------------------------------------------
class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(503 if self.path == "/health" else 404)  # an error status still shows the way is open
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def ray_node():
    import ray

    temp = tempfile.mkdtemp(prefix="vbreach", dir="/tmp")
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"ok": f"http://127.0.0.1:{server.server_address[1]}", "dead": f"http://127.0.0.1:{free_port()}",
           "node": ray.nodes()[0]["NodeManagerAddress"]}
    server.shutdown()
    ray.shutdown()


def test_each_node_reaches_the_urls_or_the_run_stops_naming_node_and_url(ray_node):
    from verl_bot.launch import reach

    assert reach.check_nodes({"the reward server": f"{ray_node['ok']}/health"}, timeout_s=5) == 1
    dead = f"{ray_node['dead']}/v1"
    with pytest.raises(VerlBotConfigError) as err:
        reach.check_nodes({"the reward server": f"{ray_node['ok']}/health", "LLM_JUDGE_BASE_URL": dead}, timeout_s=5)
    message = str(err.value)
    assert message.startswith(f"node {ray_node['node']} (") and "\n" not in message
    assert f"cannot reach LLM_JUDGE_BASE_URL at {dead} (" in message
    assert message.endswith("the run calls it from every node; serve it on an address and port every node reaches "
                            "(the recipes: REWARD_HOST, the judges' URLs)")


def _config(scorer: str, nnodes: int):
    return compose_verl_config([
        "algorithm.adv_estimator=bot", "reward.reward_manager.name=bot", f"trainer.nnodes={nnodes}",
        f"+reward.reward_kwargs.bot.scorers.aime=\"{scorer}\"",
    ])


def test_the_hook_checks_before_verls_init_on_several_nodes_only(ray_node):
    """`PPOTrainer.init` wrapped: with trainer.nnodes=2 a reward server no node reaches stops the run before verl's
    init (no model would load); on one node (the recipes checked from it) and for a stock run, verl's init runs."""
    from verl_bot.hooks.node_reach import _make_init
    from verl_bot.launch import reach

    calls = []
    init = _make_init(lambda self: calls.append(self))
    two_nodes = type("T", (), {"config": _config(ray_node["dead"], 2)})()
    assert reach.targets(two_nodes.config, {"VERL_BOT_REACH_URLS": f"STEP_JUDGE_BASE_URL={ray_node['ok']}/v1"}) == {
        "the reward server of aime (1)": f"{ray_node['dead']}/health", "STEP_JUDGE_BASE_URL": f"{ray_node['ok']}/v1"}
    dead = ray_node["dead"]
    with pytest.raises(VerlBotConfigError, match=rf"cannot reach the reward server of aime \(1\) at {dead}/health"):
        init(two_nodes)
    assert calls == []
    one_node = type("T", (), {"config": _config(ray_node["dead"], 1)})()
    init(one_node)
    stock = type("T", (), {"config": compose_verl_config(["trainer.nnodes=2"])})()
    init(stock)
    assert calls == [one_node, stock]
    init(type("T", (), {"config": _config(f"{ray_node['ok']},{ray_node['ok']}", 2)})())
    assert len(calls) == 3


# --- the last checkpoints only, across resumes (verl_bot/hooks/checkpoint_retention.py)
# -----------------------------
def _trainer(root: Path, *overrides: str):
    cfg = compose_verl_config([f"trainer.default_local_dir={root}", *overrides])
    return type("T", (), {"config": cfg})()


def test_a_resumed_run_keeps_only_the_last_checkpoints_of_all_its_launches(tmp_path):
    """verl counts only its own launch's checkpoints; after its save the wrapper removes the earlier launches' beyond
    `max_actor_ckpt_to_keep`, newest kept (a stock run, or one that keeps all, is left as verl leaves it)."""
    from verl_bot.hooks.checkpoint_retention import _make_save

    root = tmp_path / "ckpt"

    def verl_save(step: int):
        def save(self):
            (root / f"global_step_{step}" / "actor").mkdir(parents=True)
            (root / "latest_checkpointed_iteration.txt").write_text(str(step))
        return _make_save(save)

    def kept() -> list[str]:
        return sorted((p.name for p in root.glob("global_step_*")), key=lambda n: int(n.rsplit("_", 1)[1]))

    bot = ("algorithm.adv_estimator=bot", "reward.reward_manager.name=bot")
    for step in (25, 50):  # an earlier launch's: this launch's checkpoint manager never saw them
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    verl_save(75)(_trainer(root, *bot, "trainer.max_actor_ckpt_to_keep=2"))
    assert kept() == ["global_step_50", "global_step_75"]
    verl_save(100)(_trainer(root, *bot, "trainer.max_actor_ckpt_to_keep=1"))
    assert kept() == ["global_step_100"]
    verl_save(125)(_trainer(root, *bot))  # verl's default: keep all
    verl_save(150)(_trainer(root, "trainer.max_actor_ckpt_to_keep=1"))  # a stock run (verl's gae and manager)
    assert kept() == ["global_step_100", "global_step_125", "global_step_150"]
