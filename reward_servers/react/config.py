"""Knobs of the React reward server. Every field is a CLI flag (``--render-timeout-s 5``), an environment
variable (``REACT_REWARD_RENDER_TIMEOUT_S=5``) and, for fields in :data:`PER_CALL`, a per-request option
(``{"options": {"render": false}}``). Precedence: per-call option > CLI > environment > default."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, fields
from typing import Any

ENV_PREFIX = "REACT_REWARD_"


@dataclass
class ReactConfig:
    # workers
    compile_workers: int = 2  # persistent Node processes for bundle + lint
    render_slots: int = 2  # concurrent pages in the warm Chromium
    compile_timeout_s: float = 20.0  # a worker that does not answer in time is killed and replaced
    max_code_chars: int = 200_000  # longer extracted code is a compile failure without bundling
    # pipeline switches
    lint: bool = True
    render: bool = True  # False: "compiled" means bundled only (flag render_disabled)
    render_timeout_s: float = 5.0  # per render; an infinite loop hits it, the page is replaced
    settle_ms: int = 30  # wait after the first commit (two animation frames + this) before the screenshot
    screenshot_format: str = "png"  # png | jpeg
    return_screenshot: bool = False  # put the screenshot (base64) in info["screenshot"]
    # global reward
    compile_failure_penalty: float = -1.0  # part "compile" when bundling or rendering fails
    not_component_score: float = -0.3  # G of a response that holds no React component (sentinel)
    vlm_failure_score: float = -0.3  # part "vlm_judge" when there is no screenshot to judge (sentinel)
    eslint_fatal: float = -0.5
    eslint_error: float = -0.1
    eslint_warning: float = -0.02
    # think block (a reasoning model's <think> ... </think>; verl_bot_contract/think.py)
    think_opened: bool = False  # the chat template ends the prompt with <think>: no </think> = cut off inside it
    think_local: float = 0.0  # local signal S on every character of the think block (0: none)
    think_truncated_score: float = -1.5  # part think_truncated: G of a response cut off inside its think block
    # local reward
    decay_window: int = 3  # w in phi(d) = max(0, 1 - d/(w+1))
    compiler_line_penalty: float = -1.0
    compiler_line_normalize: bool = False  # -1/|E| per flagged line instead of -1
    llm_line_impacts: str = "-0.3,-0.2,-0.1"  # worst line first
    vlm_line_impacts: str = "-0.3,-0.2,-0.1"  # worst line first (two-turn attribution)
    # judges (connection: REACT_LLM_JUDGE_* / REACT_VLM_JUDGE_* env, see README)
    llm_judge: bool = True  # used only when a base URL is configured
    vlm_judge: bool = True  # used only when a base URL is configured
    vlm_local: bool = True  # two-turn line attribution after the VLM score
    llm_judge_base_url: str = ""
    llm_judge_model: str = ""
    vlm_judge_base_url: str = ""
    vlm_judge_model: str = ""
    judge_timeout_s: float = 60.0
    judge_max_retries: int = 2
    judge_max_concurrency: int = 16
    prompts_dir: str = ""

    def with_options(self, options: dict | None) -> ReactConfig:
        if not options:
            return self
        changes = {}
        types = {f.name: f.type for f in fields(self)}
        for k, v in options.items():
            if k in PER_CALL and v is not None:
                changes[k] = _cast(types[k], v)
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def eslint_weights(self) -> dict[str, float]:
        return {"fatal": self.eslint_fatal, "error": self.eslint_error, "warning": self.eslint_warning}


PER_CALL = {
    "lint", "render", "render_timeout_s", "settle_ms", "return_screenshot", "compile_failure_penalty",
    "not_component_score", "vlm_failure_score", "eslint_fatal", "eslint_error", "eslint_warning", "decay_window",
    "compiler_line_penalty", "compiler_line_normalize", "llm_line_impacts", "vlm_line_impacts", "llm_judge",
    "vlm_judge", "vlm_local", "think_opened", "think_local",
    "think_truncated_score",
}


def impacts(s: str) -> tuple[float, ...]:
    return tuple(float(x) for x in str(s).split(",") if x.strip())


def _cast(typ: Any, v: Any) -> Any:
    t = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    if t == "bool":
        if isinstance(v, str):
            return v.strip().lower() in ("1", "true", "yes", "on")
        return bool(v)
    if t == "int":
        return int(v)
    if t == "float":
        return float(v)
    return str(v)


def from_env(environ: dict | None = None) -> ReactConfig:
    env = os.environ if environ is None else environ
    vals = {}
    for f in fields(ReactConfig):
        raw = env.get(ENV_PREFIX + f.name.upper())
        if raw not in (None, ""):
            vals[f.name] = _cast(f.type, raw)
    return ReactConfig(**vals)


def add_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    base = from_env()
    for f in fields(ReactConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(base, f.name)
        t = f.type if isinstance(f.type, str) else f.type.__name__
        if t == "bool":
            parser.add_argument(flag, dest=f.name, default=default, action=argparse.BooleanOptionalAction)
        else:
            parser.add_argument(flag, dest=f.name, default=default, type={"int": int, "float": float}.get(t, str),
                                help=f"default {default!r}")
    return parser


def from_args(args: argparse.Namespace) -> ReactConfig:
    return ReactConfig(**{f.name: getattr(args, f.name) for f in fields(ReactConfig)})
