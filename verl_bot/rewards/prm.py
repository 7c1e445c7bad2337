"""A served step process reward model (PRM) as the local signal S of the `bot` manager.

The knobs under `reward.reward_kwargs.bot.prm` (`PrmSettings`, `prm_settings`) and the client (`PrmClient.score`):
a rollout's answer split into steps (`answer_steps`), step-tag text removed (`prm_tag_in_text`), the PRM's input
rendered with its own chat template (`prm_input_ids`, Qwen2.5-Math-PRM's format), one `POST <base>/pooling` to
vLLM's pooling API, and each step's value `scale * f(q_i)` as a REWARD_API local span over the step's characters.
`PrmUnavailable` becomes the failed-scorer sentinel; `PrmNotAStepModel` stops the run. `VERL_BOT_PRM_LOG` logs
every answered call. The steps, transforms, failures and knobs: docs/prm.md; docs/knobs.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_bot.credit.turns import multi_turn_enabled
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import MethodSettings, config_node, knob
from verl_bot.rewards.http import LoopSession, RetriesExhausted, retried
from verl_bot_contract.steps import BLANK_LINE, Step, split_steps
from verl_bot_contract.think import split_think

ROUTER = "router"
ROUTER_NEEDS_RM = "prm.url=router needs reward.reward_model.enable=true, or an http:// URL"
QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
TRANSFORMS: dict[str, Callable[[float], float]] = {
    "centred": lambda q: 2.0 * q - 1.0,
    "raw": lambda q: q,
    "log": lambda q: math.log(max(q, 1e-12)),
}
LOG_ENV = "VERL_BOT_PRM_LOG"
TRUNCATED_FLAG = "prm_truncated"


class PrmUnavailable(RuntimeError):
    """The PRM did not answer (timeout, 5xx, connection refused, garbage) after the retries: a transient fault."""


class PrmNotAStepModel(VerlBotConfigError):
    """The server behind `prm.url` is not a step PRM served for these tags: the run must stop."""


# ---- knobs ----------------------------------------------------------------------------------------


def _http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


@dataclass(frozen=True)
class PrmSettings(MethodSettings, node="reward.reward_kwargs.bot.prm", label="PRM"):
    """The PRM's knobs. `url` must be set; `model` defaults to `reward.reward_model.model_path` (computed by
    `prm_settings`), `tokenizer` to `model`; `data_sources` given as one text is split at its commas."""

    url: str | None = knob(None, choices=(ROUTER,), other=("an http(s):// URL of a vLLM pooling server", _http),
                           source="ours", doc="verl's reward router, or the server of the PRM")
    model: str | None = knob(None, source="ours", doc="the served model's name, sent in each request")
    tokenizer: str | None = knob(None, source="ours", doc="the PRM's tokenizer, a local folder or a hub id")
    step_separator: str = knob(BLANK_LINE, other=("a non-empty text", bool), source="ours",
                               doc="a response's steps end at runs of it (`verl_bot_contract.steps`)")
    step_tag: str = knob("<extra_0>", other=("a non-empty text", bool), source="code",
                         doc="the token after each step whose row the PRM scores (Qwen2.5-Math-PRM's)")
    positive_index: int = knob(1, bounds="[0, 1]", source="code", doc="the column of a row that is p(step is good)")
    transform: str = knob("centred", choices=tuple(TRANSFORMS), source="ours", doc="f in value = scale * f(q)")
    scale: float = knob(1.0, source="ours", doc="the scale of the step values")
    system: str | None = knob(QWEN_PRM_SYSTEM, source="code", doc="the system message of the PRM's input; '' none")
    combine: str = knob("replace", choices=("replace", "add"), source="ours",
                        doc="the PRM's spans are S (replace) or are added to the scorer's (add)")
    data_sources: tuple[str, ...] | str | None = knob(
        None, other=("a text of comma-separated ones", lambda text: True), source="ours",
        doc="the data sources the PRM scores (unset: all)",
    )
    max_length: int | None = knob(None, bounds="[1, inf)", source="ours",
                                  doc="the PRM's input length in tokens (unset: its max_position_embeddings)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.url is None:
            raise self.knob_named("url").refused(None)
        tokenizer = self.tokenizer or self.model
        if not tokenizer:
            raise VerlBotConfigError("prm needs +reward.reward_kwargs.bot.prm.model (the served PRM) or prm.tokenizer")
        sources = self.data_sources
        if isinstance(sources, str):
            sources = tuple(s.strip() for s in sources.split(",") if s.strip())
        resolved = {"tokenizer": tokenizer, "data_sources": sources, "system": self.system or ""}
        for name, value in resolved.items():
            object.__setattr__(self, name, value)


def prm_settings(config: Any) -> PrmSettings | None:
    """The `reward.reward_kwargs.bot.prm` knobs, checked; None when no PRM is configured.

    Raises `VerlBotConfigError` (a ValueError) with one line for a knob that cannot work.
    """
    node = config_node(config, PrmSettings.node)
    if not node:
        return None
    reward_model = config_node(config, "reward.reward_model")
    if node.get("url") == ROUTER and not reward_model.get("enable", False):  # before the model it would default to
        raise VerlBotConfigError(ROUTER_NEEDS_RM)
    return PrmSettings.from_config(node, model=reward_model.get("model_path"))


def load_tokenizer(path: str) -> Any:
    """The PRM's Hugging Face tokenizer from a local folder or a hub id."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=True)


def step_tag_id(tokenizer: Any, tag: str) -> int | None:
    """The id of `tag` when the tokenizer encodes it as exactly one token, else None."""
    ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 else None


def tag_problem(settings: PrmSettings, tokenizer: Any) -> str | None:
    """Why `prm.step_tag` cannot mark steps for `tokenizer` (one line), or None."""
    if step_tag_id(tokenizer, settings.step_tag) is None:
        return f"prm.step_tag {settings.step_tag!r} is not one token of {settings.tokenizer}"
    return None


def prm_problem(config: Any, token_level: bool) -> str | None:
    """The start-up check of the `prm` knobs (`verl_bot.launch.preflight`): one line, or None.

    A bad knob; a PRM with one reward per response (`token_level` false: S would go nowhere); a PRM in a
    multi-turn run (the response holds tool replies, which the PRM would read as steps of the solution); a step
    tag that is not one token of the PRM's tokenizer, when that tokenizer loads here.
    """
    try:
        settings = prm_settings(config)
    except ValueError as exc:
        return str(exc)
    if settings is None:
        return None
    if not token_level:
        return (
            "a PRM (reward.reward_kwargs.bot.prm.url) with one reward per response (token_level=false): the PRM's step "
            "scores are the local signal S, which only the token-level estimators (bot, pure, pass) read; drop "
            "the prm knobs or use one of those"
        )
    if multi_turn_enabled(config):
        return (
            "a PRM (reward.reward_kwargs.bot.prm.url) with actor_rollout_ref.rollout.multi_turn.enable=true: the "
            "response holds tool replies, which a step PRM would read as steps of the solution; give multi-turn "
            "runs their S through the scorer's turn values or spans"
        )
    try:
        tokenizer = load_tokenizer(settings.tokenizer)
    except Exception:  # noqa: BLE001 - not loadable here (a hub id offline): the manager's own load reports it
        return None
    return tag_problem(settings, tokenizer)


def default_max_length(path: str, tokenizer: Any) -> int | None:
    """The PRM's input limit: its config's `max_position_embeddings`, else the tokenizer's `model_max_length`
    when it is a real bound, else None (no limit known)."""
    try:
        from transformers import AutoConfig

        limit = getattr(AutoConfig.from_pretrained(path, trust_remote_code=True), "max_position_embeddings", None)
    except Exception:  # noqa: BLE001 - a tokenizer-only folder or an offline hub id: the tokenizer's bound
        limit = None
    if limit is None:
        limit = getattr(tokenizer, "model_max_length", None)
    return int(limit) if limit is not None and limit < 10**7 else None


# ---- steps, input, values (pure) --------------------------------------------------------------------


def answer_steps(response: str, separator: str) -> list[Step]:
    """The steps of a response's answer (`verl_bot_contract.steps.split_steps`, offsets in `response`): a
    reasoning model's think block is not scored (as the reward servers score only what follows `</think>`:
    `verl_bot_contract.think`), and a response cut off inside its think block has no step."""
    return split_steps(response, separator, split_think(response).end)


def without_tag(text: str, tag: str) -> tuple[str, bool]:
    """`text` with every occurrence of `tag` removed, and whether there was one."""
    return text.replace(tag, ""), tag in text


def prm_messages(system: str, prompt: str, steps: Sequence[str], tag: str) -> list[dict]:
    """Qwen2.5-Math-PRM's chat: [system,] user = the prompt, assistant = each step followed by the tag."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt},
            {"role": "assistant", "content": "".join(step + tag for step in steps)}]


def prm_input_ids(tokenizer: Any, messages: list[dict]) -> list[int]:
    """The token ids of `messages` rendered by the tokenizer's chat template (nothing added to the render)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def fitting_input(
    render: Callable[[int], list[int]], n_steps: int, max_length: int | None
) -> tuple[list[int], int]:
    """(ids, k): the input of the first k steps, for the largest k whose input fits `max_length` tokens.

    `render(k)` builds the input of the first k steps (its length grows with k). k = 0 with empty ids when not
    even the prompt fits.
    """
    ids = render(n_steps)
    if max_length is None or len(ids) <= max_length:
        return ids, n_steps
    low, high, best = 0, n_steps - 1, ([], 0)
    while low <= high:  # binary search over k: O(log n) renders of a long response
        mid = (low + high) // 2
        candidate = render(mid)
        if len(candidate) <= max_length:
            best, low = (candidate if mid else [], mid), mid + 1
        else:
            high = mid - 1
    return best


def check_rows(rows: Any, tags: int, tag: str, tag_id: int) -> list[list[float]]:
    """The /pooling rows of a step PRM: one `[p_bad, p_good]` per tag; raises `PrmNotAStepModel` otherwise.

    Args:
        rows: `data[0].data` of vLLM's answer. tags: step tags in the input. tag, tag_id: the tag and its id.
    """
    if not isinstance(rows, list):
        raise PrmUnavailable(f"/pooling answered {str(rows)[:200]!r} where rows were expected")
    widths = {len(row) if isinstance(row, list) else 1 for row in rows}
    if widths - {2}:
        width = min(widths - {2})
        raise PrmNotAStepModel(
            f"prm: expected [p_bad, p_good] per step, got {width} value{'' if width == 1 else 's'}: "
            "not a process reward model"
        )
    if len(rows) != tags:
        raise PrmNotAStepModel(
            f"prm: {len(rows)} step scores for {tags} tags: the server's step_tag_id is not {tag}={tag_id} "
            f'(pooler_config {{"step_tag_id":{tag_id}}})'
        )
    values = [[float(p) for p in row] for row in rows]
    if not all(math.isfinite(p) for row in values for p in row):
        raise PrmUnavailable(f"/pooling answered non-finite probabilities {values}")
    return values


def step_values(rows: Sequence[Sequence[float]], positive_index: int, transform: str, scale: float) -> list[float]:
    """Each step's value `scale * f(q)`, q = row[positive_index]: (steps, 2) rows -> (steps,) values."""
    f = TRANSFORMS[transform]
    return [scale * f(float(row[positive_index])) for row in rows]


def step_spans(steps: Sequence[Step], values: Sequence[float]) -> list[dict]:
    """REWARD_API local spans: the value of step i over its characters (steps beyond `values` get none)."""
    return [{"start": s.start, "end": s.end, "value": v} for s, v in zip(steps, values, strict=False)]


@dataclass
class PrmResult:
    """What the PRM said about one response: its local spans and the counts the metrics report."""

    spans: list[dict] = field(default_factory=list)
    steps: int = 0  # steps scored
    truncated: bool = False  # trailing steps left unscored: the input would exceed max_length
    tag_in_text: bool = False  # step-tag text was removed from the response or the prompt

    def applied(self, verdict: dict, combine: str) -> dict:
        """`verdict` (validated) with the PRM's spans as its local signal (`replace`) or added to it (`add`)."""
        local = self.spans if combine == "replace" else [*verdict["local"], *self.spans]
        flags = [*verdict["flags"], TRUNCATED_FLAG] if self.truncated else verdict["flags"]
        return {**verdict, "local": sorted(local, key=lambda s: (s["start"], s["end"])), "flags": flags}


def prm_metrics(result: PrmResult | None, failed: bool) -> dict[str, float]:
    """The rollout's `reward_extra_info` keys of the PRM (-> `reward/prm_*/mean`); zeros without a result."""
    result = result or PrmResult()
    return {
        "prm_steps": float(result.steps),
        "prm_truncated": float(result.truncated),
        "prm_tag_in_text": float(result.tag_in_text),
        "prm_failed": float(failed),
    }


# ---- the client (I/O) -------------------------------------------------------------------------------


def _log_call(url: str, payload: dict, rows: list) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"url": url, "request": payload, "probabilities": rows}) + "\n")


class PrmClient:
    """One `/pooling` call per rollout to a served step PRM; `score` gives the rollout's `PrmResult`."""

    def __init__(self, settings: PrmSettings, base_url: str, tokenizer: Any, timeout_s: float = 120.0,
                 retries: int = 2, backoff_s: float = 0.5):
        self.settings = settings
        self.url = base_url.rstrip("/") + "/pooling"
        self.tokenizer = tokenizer
        self.tag_id = step_tag_id(tokenizer, settings.step_tag)
        if self.tag_id is None:
            raise PrmNotAStepModel(tag_problem(settings, tokenizer))
        self.max_length = settings.max_length or default_max_length(settings.tokenizer, tokenizer)
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._session = LoopSession(timeout_s)

    @classmethod
    def from_settings(cls, settings: PrmSettings, reward_router_address: str | None, reward_model_tokenizer: Any,
                      reward_model_path: str | None, **kwargs: Any) -> PrmClient:
        """The client of `settings` (`prm_settings`): `url=router` is verl's reward router (`host:port`); the
        tokenizer verl loaded for the reward model is reused when it is the PRM's."""
        if settings.url == ROUTER:
            if not reward_router_address:
                raise VerlBotConfigError(ROUTER_NEEDS_RM)
            base = reward_router_address if "://" in reward_router_address else f"http://{reward_router_address}"
        else:
            base = settings.url
        same = reward_model_tokenizer is not None and settings.tokenizer == reward_model_path
        tokenizer = reward_model_tokenizer if same else load_tokenizer(settings.tokenizer)
        return cls(settings, base, tokenizer, **kwargs)

    def covers(self, data_source: str) -> bool:
        """True when the PRM gives this data source's local signal."""
        sources = self.settings.data_sources
        return sources is None or data_source in sources

    def prepare(self, prompt: str, response: str) -> tuple[list[Step], list[int], int, bool]:
        """(steps, input ids, steps in the input, tag text found): the CPU part of `score`."""
        settings, tag = self.settings, self.settings.step_tag
        steps = answer_steps(response, settings.step_separator)
        prompt, in_prompt = without_tag(prompt, tag)
        cleaned = [without_tag(step.text, tag) for step in steps]
        texts = [text for text, _ in cleaned]

        def render(k: int) -> list[int]:
            return prm_input_ids(self.tokenizer, prm_messages(settings.system, prompt, texts[:k], tag))

        ids, kept = fitting_input(render, len(steps), self.max_length) if steps else ([], 0)
        if ids.count(self.tag_id) != kept:
            raise PrmNotAStepModel(
                f"prm: the chat template of {settings.tokenizer} kept {ids.count(self.tag_id)} of {kept} step tags"
            )
        return steps, ids, kept, in_prompt or any(found for _, found in cleaned)

    async def score(self, prompt: str, response: str) -> PrmResult:
        """The PRM's verdict on one response: one POST (none when no step fits or the response has none)."""
        steps, ids, kept, tag_in_text = await asyncio.get_running_loop().run_in_executor(
            None, self.prepare, prompt, response
        )
        result = PrmResult(steps=kept, truncated=kept < len(steps), tag_in_text=tag_in_text)
        if kept == 0:
            return result
        payload = {"input": ids, "task": "token_classify"}
        if self.settings.model:
            payload = {"model": self.settings.model, **payload}
        rows = check_rows(await self._rows(payload), kept, self.settings.step_tag, self.tag_id)
        _log_call(self.url, payload, rows)
        s = self.settings
        result.spans = step_spans(steps, step_values(rows, s.positive_index, s.transform, s.scale))
        return result

    async def _rows(self, payload: dict) -> Any:
        """`data[0].data` of the server's answer, with retries for transient faults."""
        async def attempt(_: int) -> Any:
            return (await self._post(payload))["data"][0]["data"]

        try:  # every failure but a server that is not a step PRM is retried, then PrmUnavailable
            return await retried(attempt, self.retries, self.backoff_s, fatal=PrmNotAStepModel)
        except RetriesExhausted as exc:
            raise PrmUnavailable(f"prm {self.url}: {exc}") from None

    async def _post(self, payload: dict) -> Any:
        async with self._session.get().post(self.url, json=payload) as resp:
            if resp.status in (400, 404):
                body = " ".join((await resp.text())[:200].split())
                raise PrmNotAStepModel(
                    f"prm: {self.url} answered {resp.status}: the served model is not a pooling PRM ({body})"
                )
            if resp.status != 200:
                raise PrmUnavailable(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            return await resp.json(content_type=None)
