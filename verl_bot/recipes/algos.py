"""What each `ALGO` sets: its Hydra overrides, the same on a GPU node and in the CPU run.

An algorithm is verl's keys it sets (`parts`; `{VAR}` is the run's value of a setting below) and the verl-bot knobs
it passes (`knobs`, as `+algorithm.<key>=<value>`). A knob's value is its environment variable (the key upper-cased,
e.g. `PASS_DENSITY`), else the recipe's `Choice` where a recipe deliberately differs from the method (named in
`ALWAYS`, the task's table and the CPU's), else the default its `knob()` declares beside the method's code: one
source, whose provenance (paper, code, ours) docs/ALGORITHMS.md and docs/knobs.md state. The values of verl's own
keys (`VALUES`) are the GSPO and DAPO papers'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from verl_bot.advantage.pass_ import PassSettings
from verl_bot.advantage.pure import PureSettings
from verl_bot.advantage.reco import RecoSettings
from verl_bot.advantage.vps import VPSSettings
from verl_bot.errors import VerlBotConfigError
from verl_bot.knobs import Knob, MethodSettings
from verl_bot.recipes.env import Env, Refusal


@dataclass(frozen=True)
class Choice:
    """A recipe's value of a method knob that differs from its `knob()` default, and why."""

    value: object
    why: str


@dataclass(frozen=True)
class Value:
    """A value of verl's own keys that an ALGO sets: its default and where that comes from."""

    default: str
    source: str


VALUES = {
    "GSPO_CLIP_LOW": Value("3e-4", "GSPO paper"),
    "GSPO_CLIP_HIGH": Value("4e-4", "GSPO paper"),
    "DAPO_CLIP_LOW": Value("0.2", "DAPO paper"),
    "DAPO_CLIP_HIGH": Value("0.28", "DAPO paper"),
    "OVERLONG_PENALTY_FACTOR": Value("1.0", "DAPO paper"),
    # reward_extra_info key whose all-equal groups are dropped: the outcome (solved / compiled), as DAPO filters on
    # accuracy (ours: the continuous G would almost never be all-equal)
    "DAPO_FILTER_METRIC": Value("acc", "ours"),
}
# The recipes' answers end in <final>...</final> (AIME's prompt, toy_math): GRPO-VPS probes that template
ALWAYS = {"VPS_TEMPLATE": Choice("final", "the recipes' answers end in <final>...</final>")}
# Responses of tens of tokens (the CPU's tiny models): GRPO-VPS's cuts closer than the GPU's 64 of thousands
SHORT_RESPONSES = {
    "VPS_MIN_GAP": Choice(4, "responses of tens of tokens on the CPU"),
    "VPS_MAX_CUTS": Choice(4, "responses of tens of tokens on the CPU"),
    "VPS_CUT_QUANTILE": Choice(0.25, "responses of tens of tokens on the CPU"),
}
SEQ_MEAN = "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"
DENSE = "+reward.reward_kwargs.bot.token_level=true"
SCALAR = "+reward.reward_kwargs.bot.token_level=false"
NO_KL_IN_REWARD = "algorithm.use_kl_in_reward=False"


@dataclass(frozen=True)
class Algorithm:
    """An ALGO: verl's keys (`parts`), the knobs of `settings` it passes (by variable name), and, when it needs one
    correct answer per prompt, what it needs (the refusal on a task without: `needs_answer`)."""

    parts: tuple[str, ...]
    settings: type[MethodSettings] | None = None
    knobs: tuple[str, ...] = ()
    needs_answer: str = ""

    def knob_specs(self) -> tuple[Knob, ...]:
        """The declared knobs it passes, in order (a name the settings do not declare fails at import)."""
        declared = {spec.key: spec for spec in (self.settings.knobs() if self.settings else ())}
        return tuple(declared[var.lower()] for var in self.knobs)


ALGORITHMS: dict[str, Algorithm] = {
    # BoT-GRPO (the paper): dense r_t = w_g*G + w_s*S_t, per-token advantages, the paper's loss
    "bot": Algorithm(("algorithm.adv_estimator=bot", SEQ_MEAN, DENSE)),
    # GRPO: the same global signals, no local ones; the same loss aggregation as BoT (ours)
    "grpo": Algorithm(("algorithm.adv_estimator=grpo", SEQ_MEAN, SCALAR)),
    # GSPO: verl's `gspo` loss (the GSPO-token ratio sg[s_i] pi_t / sg[pi_t]: GSPO with GRPO's per-sequence advantages)
    "gspo": Algorithm((
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.clip_ratio_low={GSPO_CLIP_LOW}",
        "actor_rollout_ref.actor.clip_ratio_high={GSPO_CLIP_HIGH}", SEQ_MEAN, "algorithm.adv_estimator=grpo", SCALAR,
    )),
    # DAPO, all in verl: clip-higher, dynamic sampling on the outcome, token-mean loss, no KL, overlong shaping (the
    # bot manager adds the penalty to G, as verl's `dapo` manager does)
    "dapo": Algorithm((
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.clip_ratio_low={DAPO_CLIP_LOW}",
        "actor_rollout_ref.actor.clip_ratio_high={DAPO_CLIP_HIGH}", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.kl_loss_coef=0.0", NO_KL_IN_REWARD,
        "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric={DAPO_FILTER_METRIC}", SCALAR,
        "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward.reward_kwargs.overlong_buffer_cfg.len={OVERLONG_BUFFER_LEN}",
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={OVERLONG_PENALTY_FACTOR}",
        "+reward.reward_kwargs.overlong_buffer_cfg.log=True",
        "+reward.reward_kwargs.max_resp_len={MAX_RESPONSE_LENGTH}",
    )),
    # PURE: min-form credit over the bot manager's streams (local S_t, step ends, solved)
    "pure": Algorithm(("algorithm.adv_estimator=pure", SEQ_MEAN, NO_KL_IN_REWARD, DENSE), PureSettings,
                      ("PURE_TEMPERATURE", "PURE_OUTCOME_COEF", "PURE_STEP_SCALE")),
    # PASS (reconstructed from the abstract): process, outcome and format streams fused into per-token advantages
    "pass": Algorithm(("algorithm.adv_estimator=pass", SEQ_MEAN, NO_KL_IN_REWARD, DENSE), PassSettings,
                      ("PASS_FORMAT_COEF", "PASS_PROCESS_COEF", "PASS_DEAD_ZONE", "PASS_MIN_CHUNK", "PASS_DENSITY",
                       "PASS_OP")),
    # ReCo: GRPO's advantage x response weights, and the variance-ratio token coefficient on verl's PPO loss
    "reco": Algorithm(("algorithm.adv_estimator=reco", "actor_rollout_ref.actor.policy_loss.loss_mode=reco", SEQ_MEAN,
                       SCALAR), RecoSettings, ("RECO_W_MAX", "RECO_OCCURRENCE")),
    # GRPO-VPS: GRPO on G plus alpha x the progress of the belief in the answer, probed by its agent loop
    "vps": Algorithm(
        ("algorithm.adv_estimator=vps", SEQ_MEAN, SCALAR,
         "actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn"),
        VPSSettings, ("VPS_ALPHA", "VPS_MAX_CUTS", "VPS_MIN_GAP", "VPS_CUT_QUANTILE", "VPS_SPACE", "VPS_TEMPLATE"),
        needs_answer="probes the model's belief in one correct answer (reward_model.ground_truth); {task} prompts "
                     "have no single correct answer",
    ),
    # GRAIL: GRPO's advantage times saliency weights of the final answer, in the actor update (FSDP2 only); its knobs
    # keep their authors' yaml defaults
    "grail": Algorithm(
        ("algorithm.adv_estimator=grail", "actor_rollout_ref.actor.strategy=fsdp2",
         "actor_rollout_ref.ref.strategy=fsdp2", SEQ_MEAN, SCALAR),
        needs_answer="needs one final answer per response (<final>...</final>); {task} responses have none",
    ),
}
# GSPO_TOKEN=1: verl's gspo loss with BoT's per-token advantages and dense rewards (GSPO-token)
GSPO_TOKEN = Algorithm((*ALGORITHMS["gspo"].parts[:4], "algorithm.adv_estimator=bot", DENSE))


def algorithm(name: str, gspo_token: bool) -> Algorithm:
    """The ALGO `name` (refused in one line when there is none)."""
    if name not in ALGORITHMS:
        raise Refusal(f"ALGO must be one of {', '.join(ALGORITHMS)}; got '{name}'")
    return GSPO_TOKEN if name == "gspo" and gspo_token else ALGORITHMS[name]


def knob_value(spec: Knob, env: Env, choices: Mapping[str, Choice]) -> str:
    """A knob's value: its variable (checked as the method's reader checks it), the recipe's choice, its default."""
    var = spec.key.upper()
    given = env.get(var)
    if given:
        try:
            spec.parse(given)
        except VerlBotConfigError as err:
            raise Refusal(f"{var}={given}: {err}") from None
        return given
    return str(choices[var].value if var in choices else spec.default)


def algo_overrides(name: str, env: Env, *, task: str, has_answer: bool, answer_tasks: str,
                   max_response_length: int, choices: Mapping[str, Choice]) -> list[str]:
    """The overrides of ALGO `name` for a run on `task` (`has_answer`: one correct answer a prompt; where the
    answer-needing ALGOs run instead: `answer_tasks`), its knobs from `env` (then `choices`, then the defaults)."""
    algo = algorithm(name, env.flag("GSPO_TOKEN"))
    if algo.needs_answer and not has_answer:
        raise Refusal(f"ALGO={name} {algo.needs_answer.format(task=task)}: use it with {answer_tasks}")
    values = {var: env.get(var, value.default) for var, value in VALUES.items()}
    values["OVERLONG_BUFFER_LEN"] = env.get("OVERLONG_BUFFER_LEN", max_response_length // 4)  # ours: a quarter
    values["MAX_RESPONSE_LENGTH"] = str(max_response_length)
    knobs = [f"+algorithm.{spec.key}={knob_value(spec, env, {**ALWAYS, **choices})}" for spec in algo.knob_specs()]
    return [part.format_map(values) for part in algo.parts] + knobs


def user_wins(ours: list[str], user: list[str]) -> list[str]:
    """Ours without the overrides whose key the user appends with `+key=`: Hydra applies overrides in order, so a
    user's `key=`, `++key=` or `~key` after ours already wins, but refuses a second `+key`."""
    appended = {arg.split("=", 1)[0][1:] for arg in user if arg.startswith("+") and not arg.startswith("++")
                and "=" in arg}
    return [arg for arg in ours if arg.split("=", 1)[0].removeprefix("+") not in appended]
