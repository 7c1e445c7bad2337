"""`hf` rollout for verl 0.9.1: token-in/token-out `transformers.generate` in a Ray actor.

The three pieces verl's vllm/sglang/trtllm backends have, selected with `actor_rollout_ref.rollout.name=hf`: the
server `HFRolloutServer` (one Ray actor per replica: batched `generate`, log-probs, `prompt_logprobs` from a
teacher-forced forward, per-request seeds under `full_determinism`), its `RolloutReplica` `HFReplica`, and
`HFServerAdapter`, the `BaseRollout` in verl's actor worker that streams the weights to the server on every update.
`VERL_BOT_HF_ROLLOUT_THREADS` sets the server's torch threads. What each piece does and why: docs/cpu_demo.md,
section What the CPU backend changes in verl and vLLM, and why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput

logger = logging.getLogger("verl_bot.cpu")

SERVER_PREFIX = "hf_server_"
LOG_ENV = "VERL_BOT_HF_ROLLOUT_LOG"
THREADS_ENV = "VERL_BOT_HF_ROLLOUT_THREADS"
_CONTROL_CONCURRENCY = 16


class ChatTemplateMissing(ValueError):
    """The model's tokenizer has no chat template (verl's agent loop needs one to format prompts)."""


def check_chat_template(model_config: Any) -> None:
    """Raise `ChatTemplateMissing` unless the tokenizer (or `custom_chat_template`) gives a chat template.

    verl's driver has refused a local tokenizer folder without one already (`verl_bot.launch.preflight`, from its files,
    before Ray starts); this asks the loaded tokenizer, for what that check leaves to verl (a hub id, an hdfs://
    path) and for the server's own users, with the same message."""
    if model_config.get("custom_chat_template", None):
        return
    path = model_config.get("tokenizer_path", None) or model_config.get("path")
    tokenizer = getattr(model_config, "tokenizer", None)  # HFModelConfig has it loaded; a DictConfig has not
    if tokenizer is None or isinstance(tokenizer, str):
        from verl.utils.fs import copy_to_local
        from verl.utils.tokenizer import hf_tokenizer

        trust = bool(model_config.get("trust_remote_code", False))
        tokenizer = hf_tokenizer(copy_to_local(path), trust_remote_code=trust)
    if getattr(tokenizer, "chat_template", None):
        return
    from verl_bot.launch.preflight import (
        chat_template_message,  # on this failure path only: the driver's checks import a lot
    )

    raise ChatTemplateMissing(
        f"verl-bot hf rollout: {chat_template_message(path)} (a ChatML one: verl_bot_demo.tiny_model.CHATML_TEMPLATE)"
    )


def _state_checksum(model: torch.nn.Module) -> str:
    """A short sha256 of all parameters (float32 bytes, in name order): equal weights, equal checksum."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    key: tuple
    future: asyncio.Future = field(repr=False)
    seed: int | None = None  # full determinism: the torch seed of this request's sampling


def request_seed(seed: int, weights: tuple[str, int], prompt_ids: list[int], occurrence: int) -> int:
    """A torch seed from the rollout seed, the weights (("step", the training step they are of) or ("version", the
    update count)), the prompt and its occurrence with these weights."""
    text = json.dumps([int(seed), [weights[0], int(weights[1])], int(occurrence), prompt_ids])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


class HFRolloutServer:
    """Rollout server (a Ray actor): holds a `transformers` model and serves token-in/token-out generation."""

    def __init__(
        self,
        config: RolloutConfig,
        model_config: Any,
        replica_rank: int = 0,
        node_rank: int = 0,
        **kwargs: Any,
    ) -> None:
        from transformers import AutoModelForCausalLM

        threads = int(os.getenv(THREADS_ENV, "0"))
        if threads > 0:
            torch.set_num_threads(threads)
        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.node_rank = node_rank
        override = dict(self.model_config.override_config or {})
        attn = override.get("attn_implementation", "sdpa")
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path,
            dtype=torch.float32,
            attn_implementation=attn,
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self.model.eval()
        self.model.requires_grad_(False)
        # state_dict(keep_vars=True) names tied weights twice (lm_head.weight and embed_tokens.weight), as the
        # trainer sends them; both names point at the same tensor.
        self._params = dict(self.model.state_dict(keep_vars=True))
        tokenizer = self.model_config.tokenizer
        eos = set()
        gen_cfg = getattr(self.model, "generation_config", None)
        for src in (getattr(gen_cfg, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
            if isinstance(src, int):
                eos.add(src)
            elif src:
                eos.update(int(x) for x in src)
        self.eos_token_ids = sorted(eos)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = pad if pad is not None else (self.eos_token_ids[0] if self.eos_token_ids else 0)
        # as verl's vLLM server: the configured max_model_len, else the model's own context length
        self.max_model_len = int(self.config.max_model_len or self.model.config.max_position_embeddings)
        self.max_batch = max(1, int(self.config.max_num_seqs or 64))

        self.weight_version = 0
        self.global_steps: int | None = None
        self.weights_step: int | None = None  # the training step of the weights served (verl's weight sync)
        self.checksum = _state_checksum(self.model)
        self.num_requests = 0
        self._pending: dict[str, torch.Tensor] = {}
        self._occurrences: dict[tuple[int, ...], int] = {}  # full determinism: requests per prompt at this version
        self._queue: asyncio.Queue | None = None
        self._batcher: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._log({"event": "start", "checksum": self.checksum})

    # ------------------------------------------------------------------ status
    def _log(self, record: dict) -> None:
        record = {
            "time": time.time(),
            "pid": os.getpid(),
            "replica_rank": self.replica_rank,
            "weight_version": self.weight_version,
            "global_steps": self.global_steps,
            **record,
        }
        logger.info("hf rollout server: %s", record)
        path = os.getenv(LOG_ENV)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")

    def get_status(self) -> dict:
        """Weight version, global step, checksum, pid and request count (for tests and logs)."""
        return {
            "weight_version": self.weight_version,
            "global_steps": self.global_steps,
            "checksum": self.checksum,
            "pid": os.getpid(),
            "num_requests": self.num_requests,
        }

    # ------------------------------------------------------------- weights
    def update_weights_chunk(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """Stage one bucket of `(name, tensor)` pairs; returns how many are staged in all.

        Each tensor is the full (unsharded) weight, shaped like the model's state_dict entry of that name
        (e.g. [vocab, hidden] for embed_tokens.weight); nothing is applied until `finish_weight_update`.
        """
        for name, tensor in named_tensors:
            if name not in self._params:
                raise KeyError(f"hf rollout server: trainer sent weight {name!r} that the rollout model does not have")
            self._pending[name] = tensor
        return len(self._pending)

    @torch.no_grad()
    def finish_weight_update(self, global_steps: int | None = None) -> dict:
        """Copy the staged tensors into the model, bump the weight version and log it."""
        n = len(self._pending)
        for name, tensor in self._pending.items():
            target = self._params[name]
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"hf rollout server: shape of {name}: model {tuple(target.shape)}, sent {tuple(tensor.shape)}"
                )
            target.data.copy_(tensor.to(target.dtype))
        self._pending.clear()
        self._occurrences.clear()
        self.weight_version += 1
        self.weights_step = global_steps
        if global_steps is not None:
            self.global_steps = global_steps
        self.checksum = _state_checksum(self.model)
        self._log({"event": "update_weights", "num_tensors": n, "checksum": self.checksum})
        return self.get_status()

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # ----------------------------------------------------------- generation
    def _max_tokens(self, prompt_len: int, sampling_params: dict) -> int:
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(
                f"Prompt length ({prompt_len}) leaves no room to generate within max_model_len {self.max_model_len}"
            )
        if "max_tokens" in sampling_params:
            want = sampling_params.pop("max_tokens")
        elif "max_new_tokens" in sampling_params:
            want = sampling_params.pop("max_new_tokens")
        else:
            want = min(
                self.config.response_length, self.config.prompt_length + self.config.response_length - prompt_len
            )
        return max(1, min(int(want), room))

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Generate one response for `prompt_ids` (a list of token ids); batched with concurrent requests."""
        if image_data is not None or video_data is not None:
            raise NotImplementedError("hf rollout: multi-modal inputs are not supported")
        params = dict(sampling_params)
        prompt_ids = [int(t) for t in prompt_ids]
        max_tokens = self._max_tokens(len(prompt_ids), params)
        temperature = float(params.get("temperature", 1.0) or 0.0)
        key = (
            temperature,
            float(params.get("top_p", 1.0) if params.get("top_p") is not None else 1.0),
            int(params.get("top_k", -1) if params.get("top_k") is not None else -1),
            float(params.get("repetition_penalty", 1.0) or 1.0),
            bool(params.get("logprobs", False)),
            bool(params.get("ignore_eos", self.config.ignore_eos)),
            None if params.get("prompt_logprobs") is None else int(params["prompt_logprobs"]),
        )
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:  # one batcher per event loop (Ray's actor loop: one)
            self._loop = loop
            self._queue = asyncio.Queue()
            self._batcher = loop.create_task(self._batch_loop(self._queue))
        fut = loop.create_future()
        await self._queue.put(_Request(prompt_ids, max_tokens, key, fut, seed=self._seed_of(prompt_ids)))
        return await fut

    def _seed_of(self, prompt_ids: list[int]) -> int | None:
        """The request's torch seed under full determinism (None otherwise): `request_seed`."""
        if not self.config.full_determinism:
            return None
        occurrence = self._occurrences.get(tuple(prompt_ids), 0)
        self._occurrences[tuple(prompt_ids)] = occurrence + 1
        weights = ("version", self.weight_version) if self.weights_step is None else ("step", self.weights_step)
        return request_seed(self.config.seed, weights, prompt_ids, occurrence)

    async def _batch_loop(self, queue: asyncio.Queue) -> None:
        while True:
            batch = [await queue.get()]
            await asyncio.sleep(0.01)  # let the other requests of this step arrive
            while not queue.empty() and len(batch) < self.max_batch:
                batch.append(queue.get_nowait())
            groups: dict[tuple, list[_Request]] = {}
            for req in batch:
                groups.setdefault(req.key, []).append(req)
            batches = list(groups.values())
            if self.config.full_determinism:  # one request at a time: nothing but its own seed and prompt counts
                batches = [[req] for reqs in batches for req in reqs]
            for reqs in batches:
                key = reqs[0].key
                run = self._generate_batch if key[-1] is None else self._score_batch
                try:
                    outputs = await asyncio.to_thread(run, reqs, key)
                except Exception as e:  # hand the error to every waiting request, keep serving
                    for r in reqs:
                        if not r.future.done():
                            r.future.set_exception(e)
                    continue
                for r, out in zip(reqs, outputs, strict=True):
                    if not r.future.done():
                        r.future.set_result(out)

    @torch.no_grad()
    def _pad_prompts(self, reqs: list[_Request], left: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The requests' prompts as `(input_ids, attention_mask)`, both [B, max prompt length], padded with the
        pad token on the left (generation: every prompt ends at the last column) or on the right (scoring)."""
        length = max(len(r.prompt_ids) for r in reqs)
        input_ids = torch.full((len(reqs), length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(reqs), length), dtype=torch.long)
        for i, r in enumerate(reqs):
            cols = slice(length - len(r.prompt_ids), length) if left else slice(0, len(r.prompt_ids))
            input_ids[i, cols] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attention_mask[i, cols] = 1
        return input_ids, attention_mask

    def _generate_batch(self, reqs: list[_Request], key: tuple) -> list[TokenOutput]:
        """Run one `model.generate` over left-padded prompts.

        Builds input_ids / attention_mask [B, L] (L = longest prompt), samples
        up to max(max_tokens) new tokens [B, T]; per row keeps tokens up to and
        including the first EOS and at most its own max_tokens, and the
        log-probs [B, T] of the chosen tokens under log_softmax(logits / temperature).
        """
        from transformers import GenerationConfig

        temperature, top_p, top_k, rep, want_logprobs, ignore_eos, _ = key
        bsz = len(reqs)
        input_ids, attention_mask = self._pad_prompts(reqs, left=True)
        max_new = max(r.max_tokens for r in reqs)
        do_sample = temperature > 0
        gen = GenerationConfig(
            max_new_tokens=max_new,
            do_sample=do_sample,
            temperature=temperature if do_sample else 1.0,
            top_p=top_p if do_sample else 1.0,
            top_k=(top_k if top_k > 0 else 0) if do_sample else 0,
            repetition_penalty=rep,
            eos_token_id=None if ignore_eos else (self.eos_token_ids or None),
            pad_token_id=self.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        with torch.random.fork_rng(enabled=reqs[0].seed is not None):
            if reqs[0].seed is not None:
                torch.manual_seed(reqs[0].seed)
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=gen)
        sequences = out.sequences[:, input_ids.shape[1] :]  # [B, T]
        logprobs = None
        if want_logprobs:
            logits = torch.stack(out.logits, dim=1).float()  # [B, T, V]
            if do_sample:
                logits = logits / temperature
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, sequences.unsqueeze(-1)).squeeze(-1)  # [B, T]
        eos = set() if ignore_eos else set(self.eos_token_ids)
        results = []
        for i, r in enumerate(reqs):
            ids = sequences[i].tolist()[: r.max_tokens]
            end = len(ids)
            for j, t in enumerate(ids):
                if t in eos:
                    end = j + 1
                    break
            ids = ids[:end]
            lp = logprobs[i, :end].tolist() if logprobs is not None else None
            results.append(
                TokenOutput(
                    token_ids=ids,
                    log_probs=lp,
                    stop_reason="completed",
                    extra_fields={"global_steps": self.global_steps, "weight_version": self.weight_version},
                )
            )
        self.num_requests += bsz
        return results

    @torch.no_grad()
    def _score_batch(self, reqs: list[_Request], key: tuple) -> list[TokenOutput]:
        """Requests with `prompt_logprobs`: one teacher-forced forward over the right-padded prompts [B, L].

        Returns vLLM's layout (verl's `extract_prompt_logprobs`) in `extra_fields`: `prompt_logprobs` and
        `prompt_ids`, one entry per prompt token; entry j holds, for prompt_logprobs=0, the log-prob of token j + 1
        and that token, for k > 0 the top-k log-probs and their tokens (best first); the last entry is a dummy
        (zeros). Log-probs are the model's raw ones (temperature 1), as vLLM's. With max_tokens 1 (verl's teacher
        path) the one new token is drawn from the same forward's last logits under the request's sampling
        settings; longer requests also go through `_generate_batch`.
        """
        temperature, top_p, top_k, rep, want_logprobs, ignore_eos, k = key
        bsz = len(reqs)
        input_ids, attention_mask = self._pad_prompts(reqs, left=False)
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # [B, L, V]
        width = max(k, 1)
        extras = []
        for i, r in enumerate(reqs):
            n = len(r.prompt_ids)
            logp = torch.log_softmax(logits[i, : n - 1].float(), dim=-1)  # [n-1, V]: predicts tokens 1..n-1
            if k == 0:
                ids = input_ids[i, 1:n, None]
                values = logp.gather(-1, ids)
            else:
                values, ids = logp.topk(k, dim=-1)
            extras.append(
                {
                    "prompt_logprobs": values.tolist() + [[0.0] * width],
                    "prompt_ids": ids.tolist() + [[0] * width],
                }
            )
        if max(r.max_tokens for r in reqs) > 1:
            outputs = self._generate_batch(reqs, key)
        else:
            lengths = attention_mask.sum(dim=1)
            last = logits[torch.arange(bsz), lengths - 1].float()  # [B, V]
            outputs = [self._one_token(input_ids[i, : lengths[i]], last[i], key) for i in range(bsz)]
            self.num_requests += bsz
        for out, extra in zip(outputs, extras, strict=True):
            out.extra_fields.update(extra)
        return outputs

    def _one_token(self, prompt: torch.Tensor, logits: torch.Tensor, key: tuple) -> TokenOutput:
        """One token after `prompt` [L] from its next-token `logits` [V], sampled as `model.generate` would."""
        from transformers.generation.logits_process import (
            RepetitionPenaltyLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        temperature, top_p, top_k, rep, want_logprobs, _, _ = key
        ids, scores = prompt[None], logits[None]  # [1, L], [1, V]
        if rep != 1.0:
            scores = RepetitionPenaltyLogitsProcessor(rep)(ids, scores)
        if temperature > 0:
            scores = TemperatureLogitsWarper(temperature)(ids, scores)
            if top_k > 0:
                scores = TopKLogitsWarper(top_k)(ids, scores)
            if top_p < 1.0:
                scores = TopPLogitsWarper(top_p)(ids, scores)
            token = int(torch.multinomial(torch.softmax(scores, dim=-1), 1))
        else:
            token = int(scores.argmax(dim=-1))
        logprob = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)[token]
        return TokenOutput(
            token_ids=[token],
            log_probs=[float(logprob)] if want_logprobs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps, "weight_version": self.weight_version},
        )

    # ----------------------------------------- control calls verl makes (no-ops on CPU)
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """verl rollout replica whose server is an `HFRolloutServer` Ray actor (hybrid mode only)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(HFRolloutServer)

    def _server_name(self, node_rank: int = 0) -> str:
        if self.is_reward_model:
            return f"{SERVER_PREFIX}reward_{self.replica_rank}_{node_rank}{self.name_suffix}"
        if self.is_teacher_model:
            return f"{SERVER_PREFIX}teacher_{self.replica_rank}_{node_rank}{self.name_suffix}"
        return f"{SERVER_PREFIX}{self.replica_rank}_{node_rank}{self.name_suffix}"

    async def launch_servers(self) -> None:
        """Start one server actor for this replica and wait until its model is loaded."""
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(
                f"verl-bot hf rollout supports the hybrid (colocated trainer) mode only, got {self.rollout_mode}"
            )
        if self.nnodes != 1:
            raise NotImplementedError("verl-bot hf rollout: one replica must fit on one node")
        check_chat_template(self.model_config)
        server = self.server_class.options(
            name=self._server_name(0),
            num_cpus=0,
            max_concurrency=self.max_concurrency,
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank, node_rank=0)
        await server.get_status.remote()  # raises here if the model cannot be loaded
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-replica-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """The rollout object inside verl's actor worker: pushes the trainer's weights to the replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self._has_server = self.rollout_rank == 0
        if self._has_server:
            check_chat_template(model_config)  # fail at worker start, before any rollout server is launched
        self.server_handle = None
        self.bucket_bytes = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20

    def _server(self):
        if self.server_handle is None:
            self.server_handle = ray.get_actor(f"{SERVER_PREFIX}{self.replica_rank}_0")
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterator[tuple[str, torch.Tensor]],
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        peft_config: Any = None,
        **kwargs: Any,
    ) -> None:
        """Send `(name, full tensor)` pairs (any shape) to the server in buckets, then commit them.

        Every rank consumes the generator (FSDP gathers full tensors collectively); only
        the first rank of each replica sends.
        """
        if wire_format != "named_tensors":
            raise NotImplementedError(f"hf rollout: wire_format {wire_format!r} is not supported")
        if peft_config is not None:
            raise NotImplementedError("hf rollout: LoRA adapters are not supported; set model.lora.merge=True")
        server = self._server() if self._has_server else None
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0

        async def flush() -> None:
            nonlocal bucket, size
            if server is not None and bucket:
                await server.update_weights_chunk.remote(bucket)
            bucket, size = [], 0

        async for name, tensor in _as_async_iter(weights):
            if server is not None:
                t = tensor.detach().to("cpu").clone()
                bucket.append((name, t))
                size += t.numel() * t.element_size()
            if size >= self.bucket_bytes:
                await flush()
        await flush()
        if server is not None:
            await server.finish_weight_update.remote(global_steps)

    def generate_sequences(self, prompts: Any) -> Any:
        raise NotImplementedError("hf rollout serves the async agent loop only (no sync generate_sequences)")


async def _as_async_iter(items):
    """Iterate a sync or an async iterable alike (verl passes either as the weights generator)."""
    if hasattr(items, "__aiter__"):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
