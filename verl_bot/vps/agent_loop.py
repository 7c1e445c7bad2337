"""The `vps_single_turn` agent loop: verl's single-turn loop, then GRPO-VPS's belief probes on the same server.

Selected with `actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn` (registered through verl's
public `register` of `verl.experimental.agent_loop`). After verl's `SingleTurnAgentLoop` generates a rollout
(asking the server for the sampled tokens' log-probs: the surprisal cut rule reads them), it probes the rollout
(`verl_bot.vps.probing.probe_rollout`: the prompt + a prefix + the answer template + the row's
`reward_model.ground_truth`, scored with `prompt_logprobs` by the rollout server, concurrently) and stores the
record in `extra_fields["verl_bot_vps"]`; verl carries it to TransferQueue with the row, and the `vps`
estimator reads it in the batch context. The probes run inside the agent loop because in verl's sync mode the
rollout servers sleep during the trainer step. Validation rollouts are probed too (the loop cannot tell them
apart); their records are unused.
"""

from __future__ import annotations

import functools
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from verl_bot.advantage.vps import PROBE_FIELD, VPSSettings, answer_text, probe_params
from verl_bot.vps.probing import choose_template, probe_rollout


@functools.lru_cache(maxsize=8)
def model_max_positions(path: str, trust_remote_code: bool = False) -> int:
    """The model's context length (`max_position_embeddings` of its HF config): vLLM's default max_model_len."""
    from transformers import AutoConfig
    from verl.utils.fs import copy_to_local

    return int(AutoConfig.from_pretrained(copy_to_local(path), trust_remote_code=trust_remote_code)
               .max_position_embeddings)


def prompt_text(messages: Any) -> str:
    """The text of a chat prompt (a list of {role, content} messages) for template auto-detection."""
    return "\n".join(str(m.get("content", "")) for m in messages or [] if isinstance(m, dict))


class VPSAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn agent loop plus GRPO-VPS belief probes after generation."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        asked = bool(sampling_params.get("logprobs", False))
        output = await super().run({**sampling_params, "logprobs": True}, **kwargs)
        settings = VPSSettings.from_config(self.config.get("algorithm"))
        _, template = choose_template(settings.template, kwargs.get("data_source", ""), prompt_text(
            kwargs.get("raw_prompt")))
        model = self.config.actor_rollout_ref.model
        max_len = self.rollout_config.get("max_model_len") or model_max_positions(
            str(model.path), bool(model.get("trust_remote_code", False))
        )
        record = await probe_rollout(
            self._probe,
            prompt_ids=output.prompt_ids,
            response_ids=output.response_ids,
            response_logprobs=output.response_logprobs,
            answer=answer_text((kwargs.get("reward_model") or {}).get("ground_truth")),
            template=template,
            tokenizer=self.tokenizer,
            settings=settings,
            max_model_len=int(max_len),
        )
        record["gen_s"] = float(output.metrics.generate_sequences)  # the generate call, for the cost metrics
        output.extra_fields[PROBE_FIELD] = record
        if not asked:  # the rollout config did not ask for log-probs: store none, as verl would
            output.response_logprobs = None
        return output

    async def _probe(self, ids: list[int]) -> Any:
        return await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=ids, sampling_params=probe_params(str(self.rollout_config.name))
        )
