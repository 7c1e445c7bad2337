"""The paper's tasks and recipes: what a task scores with (its reward server, its judges, its data) and its sizes,
and each recipe, a task on one model family (`verl_bot.launch.families`).

A task's numbers are the paper's or our documented choice (docs/recipes.md, "Batch sizes and their sources"); a
recipe adds its model's response length (the reasoning model thinks first) and its family's template options.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from verl_bot.launch.families import BY_RECIPE_TAG, Family
from verl_bot.recipes.algos import Choice


@dataclass(frozen=True)
class JudgeSpec:
    """A judge a task's reward server calls: the variables of its URL and served name, its name in messages, and for
    one the recipe starts (`START_JUDGE=1`) the variables of its model, GPUs and port, its port's default and its log;
    `server_env`: the prefix of the reward server's variables for it (`<prefix>_BASE_URL`, `_MODEL`, `_API_KEY`,
    `_MAX_TOKENS`)."""

    url_var: str
    served_var: str
    name: str
    model_var: str
    gpu_var: str
    port_var: str
    port: int
    log: str
    server_env: str


def _react_judge_up(health: Mapping) -> bool:
    return (health.get("judges") or {}).get("llm") == "up"


def _aime_judge_up(health: Mapping) -> bool:
    return health.get("judge") == "reachable"


@dataclass(frozen=True)
class Task:
    """A paper task. `judges[0]` is the one the reward needs (`REQUIRE_JUDGE`), `judge_what` its name in messages;
    `has_answer`: every prompt has one correct answer and the responses end in <final>...</final> (vps and grail run);
    `choices`: where the task's recipes differ from a method knob's default (`verl_bot.recipes.algos`)."""

    name: str
    reward_port: int
    server_module: str
    judges: tuple[JudgeSpec, ...]
    judge_what: str
    judge_up: Callable[[Mapping], bool]
    has_answer: bool
    train_batch_size: int
    total_steps: int
    w_local: str
    val_n: int
    data_hint: str  # how to make the data ({py}, {root}, {data_dir} filled in)
    judge_for: tuple[str, ...] | None = None  # the ALGOs whose reward needs the judge (None: every one)
    choices: Mapping[str, Choice] = field(default_factory=dict)

    def requires_judge(self, algo: str, prm: bool) -> bool:
        """Whether the reward needs the task's judge (`REQUIRE_JUDGE`'s default); a PRM gives S instead of a step
        judge."""
        if self.judge_for is None:
            return True
        return not prm and algo in self.judge_for


LLM_JUDGE = JudgeSpec("LLM_JUDGE_BASE_URL", "LLM_JUDGE_MODEL", "LLM judge", "JUDGE_MODEL_PATH", "JUDGE_GPUS",
                      "JUDGE_PORT", 8790, "judge.log", "REACT_LLM_JUDGE")
VLM_JUDGE = JudgeSpec("VLM_JUDGE_BASE_URL", "VLM_JUDGE_MODEL", "VLM judge", "VLM_JUDGE_MODEL_PATH", "VLM_JUDGE_GPUS",
                      "VLM_JUDGE_PORT", 8791, "vlm_judge.log", "REACT_VLM_JUDGE")
STEP_JUDGE = JudgeSpec("STEP_JUDGE_BASE_URL", "STEP_JUDGE_MODEL", "step judge", "JUDGE_MODEL_PATH", "JUDGE_GPUS",
                       "JUDGE_PORT", 8790, "judge.log", "MATH_JUDGE")
# PURE's step value is clip(scale * mean S_t of the step, -1, 1): AIME's S_t is 0.5 * e_s / |S|, so 10 maps a verdict
# e_s = +-1 of a 5-step solution to +-1 (ours); React's line penalties are on that scale already (the knob's 1)
STEP_SCALE_10 = {"PURE_STEP_SCALE": Choice(10.0, "AIME's S_t is 0.5*e_s/|S|: 10 maps a 5-step verdict to +-1")}

TASKS: dict[str, Task] = {
    "react": Task(
        name="react", reward_port=8801, server_module="reward_servers.react", judges=(LLM_JUDGE, VLM_JUDGE),
        judge_what="LLM code judge", judge_up=_react_judge_up, has_answer=False,
        train_batch_size=16,  # ours: the paper states none for React
        total_steps=150, w_local="0.5", val_n=1,  # w_s: ours (open in the paper); greedy validation
        data_hint="Make them: {py} {root}/recipes/data/react.py --out-dir DIR (then TRAIN_FILES/VAL_FILES or "
                  "DATA_DIR=DIR)",
        # the compiler and ESLint alone get hacked: every ALGO needs the LLM code judge (REQUIRE_JUDGE=0: the
        # compiler + ESLint ablation of Fig. 4)
    ),
    "aime": Task(
        name="aime", reward_port=8802, server_module="reward_servers.math", judges=(STEP_JUDGE,),
        judge_what="step judge", judge_up=_aime_judge_up, has_answer=True,
        train_batch_size=8,  # the paper: 8 prompts x 8 rollouts
        total_steps=200, w_local="1.0", val_n=4,  # w_s = 1: Eq. 8; Pass@1/2/4
        data_hint="Make them (AIME 1983-2024 from the Hugging Face hub): {py} {root}/recipes/data/aime.py "
                  "--out-dir {data_dir}",
        judge_for=("bot", "pure", "pass"),  # the step judge gives the local signal, which only these read
        choices=STEP_SCALE_10,
    ),
}


@dataclass(frozen=True)
class Recipe:
    """One paper recipe (`recipes/<name>.sh`): a task on a model family, with the response length it needs."""

    name: str
    task: Task
    family: Family
    max_response_length: int

    @property
    def model_overrides(self) -> tuple[str, ...]:
        """The family's chat-template options in the recipes' mode (SmolLM3: thinking off, our choice)."""
        return tuple(f"+data.apply_chat_template_kwargs.{k}={v}" for k, v in self.family.recipe_template_kwargs.items())


# Response lengths (ours): a React component is 100-250 lines; the reasoning model (Phi) thinks first
LENGTHS = {("react", "qwen"): 3072, ("react", "smollm"): 3072, ("react", "phi"): 6144,
           ("aime", "qwen"): 4096, ("aime", "smollm"): 4096, ("aime", "phi"): 8192}
RECIPES: dict[str, Recipe] = {
    f"{task}_{tag}": Recipe(f"{task}_{tag}", TASKS[task], BY_RECIPE_TAG[tag], length)
    for (task, tag), length in LENGTHS.items()
}


def judge_up(task: Task, body: str) -> bool:
    """Does a reward server's /health (its JSON text) say that the judge the task needs is on?"""
    try:
        health = json.loads(body)
        return bool(task.judge_up(health))
    except (ValueError, AttributeError):
        return False
