"""verl's configuration surface, classified for verl-bot: every entry module, config key and code-path choice of the
installed verl (`verl_bot.launch.verl_schema`), per verl-bot method group, is tested, refused, neutral or not run.

The table is data: `ENTRIES` (entry modules), `ROWS` (config keys and `key=value` choices; the first row whose
pattern matches a key classifies it). `surface_problem` holds the refusals no other start-up check makes
(`verl_bot.launch.preflight` calls it); `python -m verl_bot.launch.verl_surface --write` writes docs/verl_settings.md;
`tests/repo/test_verl_surface.py` fails on a key, entry or choice of the installed verl the table does not classify.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_bot.rewards.settings import RETURN_ESTIMATORS

TESTED, REFUSED, NEUTRAL, NOT_RUN = "tested", "refused", "neutral", "not run"
STATUSES = {
    TESTED: "a test runs it (the test ids named; a repo test checks that each exists)",
    REFUSED: "the start-up checks stop the run before Ray in one line (the message's start named; a repo test "
             "shows each refusal through `verl_bot.launch.preflight.check_config` on verl's composed config)",
    NEUTRAL: "what it changes does not reach verl-bot's rewards, advantages, losses or batches, or verl-bot reads "
             "it as verl does (the reason named)",
    NOT_RUN: "only a GPU can show it: not run here; `python -m verl_bot.hooks.touch_points` checks what verl-bot "
             "needs there (named)",
}
# the method groups (table columns) and each method's overrides on verl's default config
GROUPS: dict[str, str] = {
    "dense": "the `bot` manager with a dense estimator: `bot`, `pure`, `pass`",
    "scalar": "verl-bot's scalar methods with the `bot` manager: `reco` (estimator and loss), `vps`, `grail`",
    "verl": "verl's own estimators (`grpo`, `gae`, ...) with the `bot` manager",
}
BOT_MANAGER = "reward.reward_manager.name=bot"
METHODS: dict[str, tuple[str, ...]] = {
    "bot": ("algorithm.adv_estimator=bot", BOT_MANAGER),
    "pure": ("algorithm.adv_estimator=pure", BOT_MANAGER),
    "pass": ("algorithm.adv_estimator=pass", BOT_MANAGER),
    "reco": ("algorithm.adv_estimator=reco", "actor_rollout_ref.actor.policy_loss.loss_mode=reco", BOT_MANAGER),
    "vps": ("algorithm.adv_estimator=vps", "actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn",
            BOT_MANAGER),
    "grail": ("algorithm.adv_estimator=grail", "actor_rollout_ref.actor.strategy=fsdp2",
              "actor_rollout_ref.ref.strategy=fsdp2", BOT_MANAGER),
}
GROUP_OF = {"bot": "dense", "pure": "dense", "pass": "dense", "reco": "scalar", "vps": "scalar", "grail": "scalar"}
VERL_GROUP = "verl"  # every other estimator: verl's own (`verl_schema.choices("algorithm.adv_estimator")`)


@dataclass(frozen=True)
class Answer:
    """One cell: a status and its text (the reason, the refusal's start, what the touch-point command checks, or
    a note), the tests that run it (`tested`) or the overrides that set it (`refused`)."""

    status: str
    text: str = ""
    tests: tuple[str, ...] = ()
    example: tuple[str, ...] = ()


def tested(*tests: str, note: str = "") -> Answer:
    return Answer(TESTED, note, tests=tests)


def refused(message: str, *example: str) -> Answer:
    return Answer(REFUSED, message, example=example)


def neutral(reason: str) -> Answer:
    return Answer(NEUTRAL, reason)


def not_run(check: str) -> Answer:
    return Answer(NOT_RUN, check)


@dataclass(frozen=True)
class Row:
    """Config keys and their answer per column (`all`, a group of `GROUPS`, or a method: one of `METHODS` or of
    verl's estimators). A pattern is a key, a subtree (`key.*`), any subtree or key of a name (`*.name.*`,
    `*.name`) or a choice (`key=value`); `when` (a `key=value`) makes the row the answer under that setting only,
    beside the row that classifies the keys."""

    patterns: tuple[str, ...]
    cells: Mapping[str, Answer]
    when: str = ""

    def matches(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, p) or (p.endswith(".*") and key == p[:-2]) for p in self.patterns)


def row(*patterns: str, when: str = "", **cells: Answer) -> Row:
    return Row(patterns, cells, when)


@dataclass(frozen=True)
class EntryRow:
    """An entry module of verl, its answers, and which keys of its config its row covers: `keys` (none: they are
    classified key by key), `own` (those its config adds to `verl.trainer.main_ppo`'s), `all` (every one)."""

    module: str
    cells: Mapping[str, Answer]
    covers: str = "keys"
    marks: tuple[str, ...] = field(default=())  # top-level keys only its config has: how preflight knows it
    note: str = ""


def answer(cells: Mapping[str, Answer], method: str) -> Answer | None:
    """The answer of `cells` for `method` (a verl-bot method or a verl estimator): its own, its group's, or all's."""
    group = GROUP_OF.get(method, VERL_GROUP)
    return cells.get(method) or cells.get(group) or cells.get("all")


# ------------------------------------------------------------------------------------------ the tests named
E2E = "tests/e2e/"
BOT_V1 = f"{E2E}test_e2e_verl_rewards.py::test_gsm8k_of_verls_preprocessing_with_only_the_two_overrides"
BOT_RESUME = f"{E2E}test_e2e_resume.py::test_a_killed_bot_run_resumes_from_its_checkpoint_as_if_never_stopped"
BOT_LEGACY = f"{E2E}test_legacy_trainer.py::test_bot_trains_through_verls_legacy_trainer_on_vllm"
BOT_LORA = f"{E2E}test_trainer_modes.py::test_lora_on_vllm_samples_the_updated_adapter_and_trains_bot"
BOT_COLOCATE = f"{E2E}test_trainer_modes.py::test_colocate_async_trains_bot_one_update_off_policy"
BOT_TOOL = f"{E2E}test_e2e_tool.py::test_tool_agent_loop_gets_per_turn_rewards_and_bot_advantages"
BOT_MULTI_OUTPUT = f"{E2E}test_multi_output.py::test_two_output_loop_through_verls_trainer"
BOT_PRM = f"{E2E}test_prm_served.py::test_a_tiny_prm_served_by_verls_reward_pool_is_the_local_signal"
BOT_REACT = f"{E2E}test_recipes_cpu.py::test_react_qwen_bot_on_verls_vllm_rollout"
PURE = f"{E2E}test_cpu_e2e.py::test_pure_on_cpu_then_a_server_refusing_our_credentials_stops_the_run_before_its_update"
PASS = f"{E2E}test_e2e_pass.py::test_pass_killed_in_step_3_resumes_and_the_actor_uses_its_advantages_throughout"
RECO = f"{E2E}test_e2e_reco.py::test_reco_two_steps_on_cpu"
VPS = f"{E2E}test_recipes_cpu.py::test_aime_smollm_vps_probes_reach_the_estimator"
GRAIL = f"{E2E}test_recipes_cpu.py::test_aime_smollm_grail_weights_reach_verls_loss"
GRAIL_RESUME = (f"{E2E}test_recipes_cpu.py::"
                "test_aime_smollm_grail_resumes_from_its_checkpoint_with_its_weights_at_the_loss")
GRPO = f"{E2E}test_cpu_e2e.py::test_grpo_with_the_bot_manager_a_reward_server_restarted_mid_run_and_ctrl_c"
DAPO_FILTER = f"{E2E}test_verl_setups.py::test_dapo_filter_drops_groups_without_signal"
RETURNS = f"{E2E}test_verl_setups.py::test_return_estimators_see_local_signal"
LEGACY_SCALAR = "tests/component/test_legacy_adapter.py::test_a_scalar_run_is_verls_own_postprocess"
VERL_SCORER = "tests/component/test_verl_scorer.py::test_custom_function_dict_gives_g_parts_and_local_spans"
DENSE_RUNS = (BOT_V1, PURE, PASS)
SCALAR_RUNS = (RECO, VPS, GRAIL)

# ------------------------------------------------------------------------------------------ shared reasons
NOT_A_SETTING = neutral("the dataclass verl builds the subtree into: not a setting")
OBSERVES = neutral("profiling, tracing, logging: observes a run, changes none of its numbers")
PLACEMENT = neutral("resources, placement, timeouts: where and when things run, not what reaches a reward, an "
                    "advantage, a loss or a batch")
ENGINE = neutral("the training engine's numerics and memory (dtype, sharding, offload, compile, padding, "
                 "micro-batching): the same per-token tensors reach verl's loss; verl-bot's advantages are (B, T) "
                 "like verl's own")
SERVING = neutral("how the rollout engine serves (memory, batching, parallelism, caching): the responses it "
                  "samples are scored and credited the same way")
SAMPLING = neutral("which responses are sampled (sampling parameters, lengths, data): verl-bot scores and credits "
                   "whatever verl samples, as verl's own managers do")
CRITIC = neutral("the critic (used by `gae` only, which reads the token rewards as returns); verl-bot's own "
                 "estimators are critic-free and verl builds no critic for them")
VERL_OWN = neutral("verl's own code path, unchanged: verl-bot's hooks do not touch it")
CHECKPOINT = tested(BOT_RESUME, PASS, GRAIL_RESUME,
                    note="saved and resumed; verl-bot keeps its metrics history and checkpoint retention")
REFERENCE = neutral("the reference policy (the KL loss's, `actor_rollout_ref.actor.use_kl_loss`): computed and "
                    "used by verl, after verl-bot's advantages")
GPU_ENGINES = ("the trainer's hooks (`PPOTrainer`, `RayPPOTrainer`: any engine) and the worker's `ppo_loss` "
               "(`engine_workers`, which every engine calls: a verl-bot loss's knobs)")
NOT_RUN_ENGINE = not_run(GPU_ENGINES)
FILTER = "algorithm.filter_groups.enable=true"
DENSE_ONLY_KL = refused("algorithm.use_kl_in_reward=true with adv_estimator=", "algorithm.use_kl_in_reward=true")
SUMMED = neutral("reads the token rewards as verl's `grpo` does (summed per response): verl's per-token KL penalty "
                 "sums into it as with verl's managers")
SEQUENCE_LOSS = refused("verl's GMPO loss averages each response's advantages into one",
                        "actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean")
TEXT_ONLY = refused("needs a text-only model", "actor_rollout_ref.model.path={vlm_model}")  # a test's VLM folder
MULTI_MODAL = neutral("images, videos and audio are prompt inputs: the `bot` manager scores the decoded response "
                      "and credits its tokens; not run with verl-bot (no multi-modal model here)")
UNSEEN_SCALAR = neutral("sums each response's token rewards into one score: the `bot` manager gives it w_g G on "
                        "the last token (`token_level` auto), as verl's `naive` manager gives its score; not run "
                        "with verl-bot")
# verl's estimators that read the token rewards as returns (`RETURN_ESTIMATORS`), the first two tested
RETURN_ESTIMATOR = neutral("reads the token rewards as returns (reward-to-go, per token), like `gae` (tested): the "
                           "`bot` manager gives it the same `returns` layout (G on the last token, S_t on the tokens "
                           "it covers: `verl_bot/rewards/settings.py`); not run with verl-bot")

# ------------------------------------------------------------------------------------------ the entry modules
ASYNC_ENTRY = not_run(
    "its driver's `run_ppo` runs the start-up checks before Ray (`verl_bot/hooks/run_ppo.py`) and refuses the CPU "
    "platform, where verl's standalone rollout has no checkpoint engine (`verl_bot/launch/entry_points.py`); the "
    "step logic runs through `RayPPOTrainer.__init__` and the functions `separation.ray_trainer` binds, which the "
    "touch-point command checks; the trainer's own methods with verl-bot's step logic: "
    "tests/component/test_separation_trainers.py")
ASYNC_NOTE = "docs/verl_setup.md, verl's other trainers"
ENTRIES: tuple[EntryRow, ...] = (
    EntryRow("verl.trainer.main_ppo", {
        "dense": tested(*DENSE_RUNS, BOT_LEGACY), "scalar": tested(*SCALAR_RUNS), "verl": tested(GRPO)}),
    EntryRow("verl.experimental.one_step_off_policy.main_ppo", {"all": ASYNC_ENTRY}, covers="own",
             marks=("rollout",), note=ASYNC_NOTE),
    EntryRow("verl.experimental.fully_async_policy.fully_async_main", {"all": ASYNC_ENTRY}, covers="own",
             marks=("rollout", "async_training"), note=ASYNC_NOTE),
    EntryRow("verl.trainer.main_generation_server", {
        "all": neutral("generates responses for a data set with verl's rollout servers: no reward manager, "
                       "estimator or loss runs")}),
    EntryRow("verl.trainer.main_eval", {
        "all": neutral("scores a file of generations with verl's reward functions: no RL step")}, covers="all"),
    EntryRow("verl.trainer.sft_trainer", {"all": neutral("supervised fine-tuning: no RL step")}, covers="all"),
    EntryRow("verl.trainer.sft_trainer_ray", {"all": neutral("supervised fine-tuning on Ray: no RL step")},
             covers="all"),
)

# ------------------------------------------------------------------------------------------ choices (key=value)
CHOICE_ROWS: tuple[Row, ...] = (
    row("algorithm.adv_estimator=grpo", verl=tested(GRPO)),
    row("algorithm.adv_estimator=gae", verl=tested(RETURNS, note="PPO with a critic (`critic.*`)")),
    row("algorithm.adv_estimator=reinforce_plus_plus", verl=tested(RETURNS)),
    *(row(f"algorithm.adv_estimator={name}", verl=RETURN_ESTIMATOR) for name in RETURN_ESTIMATORS[2:]),
    *(row(f"algorithm.adv_estimator={name}", verl=UNSEEN_SCALAR)
      for name in ("grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg",
                   "reinforce_plus_plus_baseline")),
    row("algorithm.adv_estimator=gdpo", verl=neutral(
        "normalizes each reward component named by its `gdpo_reward_keys` knob apart, reading them from the batch "
        "as verl does; the `bot` manager reports G's parts as a verl function's dict keys; not run with verl-bot")),
    row("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", dense=tested(*DENSE_RUNS),
        scalar=tested(VPS, GRAIL), verl=tested(GRPO)),
    row("actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean",
        dense=SEQUENCE_LOSS, vps=SEQUENCE_LOSS, grail=SEQUENCE_LOSS,
        reco=neutral("ReCo's advantage is one value per response: its mean is itself"),
        verl=neutral("verl's own pairing of its loss and estimator")),
    row(*(f"actor_rollout_ref.actor.policy_loss.loss_mode={name}" for name in (
        "bypass_mode", "cispo", "clip_cov", "dppo_kl", "dppo_tv", "dro", "gpg", "gspo", "kl_cov", "sapo")), all=neutral(
        "verl's loss weighs each token by its own advantage (verl-bot's (B, T) advantages as verl's own); the "
        "`reco` estimator's weights work with any loss; not run with verl-bot")),
    row("actor_rollout_ref.rollout.name=vllm", dense=tested(BOT_LEGACY, BOT_LORA, BOT_REACT),
        scalar=tested(VPS, GRAIL), verl=tested(GRPO)),
    row("actor_rollout_ref.rollout.name=sglang", all=not_run(
        "the agent loop's and reward loop's hooks (engine-independent); `vps` asks SGLang for prompt_logprobs"),
        grail=not_run("as for the others; GRAIL's weights come from the actor, not the rollout")),
    row("actor_rollout_ref.rollout.name=trtllm", all=not_run(
        "the agent loop's and reward loop's hooks (engine-independent)"),
        vps=refused("server does not return", "actor_rollout_ref.rollout.name=trtllm")),
    row("actor_rollout_ref.actor.strategy=fsdp2", dense=tested(*DENSE_RUNS), scalar=tested(*SCALAR_RUNS),
        verl=tested(GRPO)),
    row("actor_rollout_ref.actor.strategy=fsdp", all=not_run(
        f"{GPU_ENGINES}; FSDP1 needs an accelerator"),
        grail=refused("GRAIL's extra backward is tested on FSDP2 only", "actor_rollout_ref.actor.strategy=fsdp")),
    *(row(f"actor_rollout_ref.actor.strategy={name}", all=NOT_RUN_ENGINE, grail=refused(
        "GRAIL's weights are computed in verl's FSDP engine only", f"actor_rollout_ref.actor.strategy={name}"))
      for name in ("megatron", "fsdp_turbo", "torchtitan", "veomni", "automodel")),
    row("trainer.v1.trainer_mode=sync", dense=tested(*DENSE_RUNS), scalar=tested(*SCALAR_RUNS), verl=tested(GRPO)),
    row("trainer.v1.trainer_mode=colocate_async", dense=tested(BOT_COLOCATE), all=neutral(
        "the same hooks as `sync` (replay buffer, reward loop, advantage step) on batches one update old; verl's "
        "importance ratio covers it; run with `bot` only")),
    row("trainer.v1.trainer_mode=separate_async", all=not_run(
        "the same hooks as `sync`; a standalone rollout pool over NCCL: verl's own assertions are checked before "
        "Ray (`verl_bot/launch/trainer_modes.py`), refused on the CPU")),
)

# ------------------------------------------------------------------------------------------ config keys
KEY_ROWS: tuple[Row, ...] = (
    row("*._target_", all=NOT_A_SETTING),
    row("*.profiler.*", all=OBSERVES),
    row("global_profiler.*", all=OBSERVES),
    row("*.megatron.*", all=NOT_RUN_ENGINE),
    row("*.torchtitan.*", all=NOT_RUN_ENGINE),
    row("*.veomni.*", all=NOT_RUN_ENGINE),
    row("*.checkpoint.*", all=CHECKPOINT),
    row("*.optim.*", all=neutral("the optimizer and its schedule: applies the gradient of verl's loss")),
    row("model_engine", all=tested(*DENSE_RUNS, *SCALAR_RUNS, GRPO, note="`dp` (FSDP); `megatron`, `torchtitan`, "
                                   "`veomni`: their `actor_rollout_ref.actor.strategy=...` rows")),
    # algorithm
    row("algorithm.adv_estimator", dense=tested(*DENSE_RUNS), scalar=tested(*SCALAR_RUNS),
        verl=tested(GRPO, note="each of verl's estimators: its `algorithm.adv_estimator=...` row")),
    row("algorithm.norm_adv_by_std_in_grpo", all=neutral(
        "read by every verl-bot estimator as verl's `grpo` reads it (std or mean only); hand-computed in "
        "tests/unit/test_bot_advantage.py")),
    row("algorithm.use_kl_in_reward", dense=DENSE_ONLY_KL, scalar=SUMMED, verl=VERL_OWN),
    row("algorithm.kl_penalty", "algorithm.kl_ctrl.*", dense=neutral("read with `use_kl_in_reward` only, refused "
                                                                     "here"), scalar=SUMMED, verl=VERL_OWN),
    row("algorithm.gamma", all=neutral("read by return estimators only (`gae`, `reinforce_plus_plus`)"),
        verl=neutral("verl's discount of its return estimators, as verl reads it")),
    row("algorithm.lam", all=neutral("read by `gae` only"), verl=neutral("GAE's lambda, as verl reads it")),
    row("algorithm.use_pf_ppo", all=neutral(
        "verl applies it to `gae` only, in the legacy trainer's advantage step (`ray_trainer.compute_advantage`)")),
    row("algorithm.pf_ppo.*", all=neutral("the knobs of `algorithm.use_pf_ppo` (`gae` only)")),
    row("algorithm.filter_groups.*", all=tested(DAPO_FILTER, note="the v1 trainer's replay buffer drops the groups "
                                                "the estimator cannot learn from"),
        vps=refused("algorithm.filter_groups.enable=true with adv_estimator=vps", FILTER),
        **dict.fromkeys(RETURN_ESTIMATORS, refused("drops the groups a group-relative estimator cannot", FILTER))),
    row("algorithm.filter_groups.*", when="trainer.use_v1=false", all=refused(
        "algorithm.filter_groups.enable=true on a legacy trainer", "trainer.use_v1=false", FILTER)),
    row("algorithm.rollout_correction.*", all=neutral(
        "verl's rollout-correction weights multiply the per-token loss and its rejection sampling masks tokens "
        "before the estimator, which leaves them out as padding; run by hand with `bot` (trains, with bot's "
        "diagnostics); the `reco` loss multiplies verl's weights into its own")),
    # the actor's loss
    row("actor_rollout_ref.actor.policy_loss.loss_mode", dense=tested(*DENSE_RUNS), scalar=tested(RECO, VPS, GRAIL),
        verl=tested(GRPO, note="each of verl's losses: its `policy_loss.loss_mode=...` row")),
    row("actor_rollout_ref.actor.policy_loss.*", all=neutral(
        "the knobs of one of verl's losses (`clip_cov`, `kl_cov`, `dro`, ...): the loss's row")),
    row("actor_rollout_ref.actor.loss_agg_mode", all=tested(
        BOT_V1, BOT_REACT, VPS, GRAIL, RECO, note="`token-mean` (verl's default) and `seq-mean-token-mean` (the "
        "recipes'); the other modes aggregate the same per-token losses")),
    row(*(f"actor_rollout_ref.actor.clip_ratio{end}" for end in ("", "_c", "_high", "_low")), all=neutral(
        "verl's PPO clip; the `reco` loss clips as vanilla and caps its ratio at `clip_ratio_c` by default")),
    row("actor_rollout_ref.actor.tau_pos", "actor_rollout_ref.actor.tau_neg",
        all=neutral("the `sapo` loss's knobs: its row")),
    row("actor_rollout_ref.actor.use_kl_loss", all=tested(BOT_RESUME, note="a KL loss beside verl-bot's "
                                                           "advantages")),
    row("actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.kl_loss_type", all=tested(BOT_RESUME)),
    row("actor_rollout_ref.actor.entropy_coeff", all=neutral("verl's entropy bonus, added to the loss as verl does")),
    row("actor_rollout_ref.actor.calculate_entropy", all=OBSERVES),
    row("actor_rollout_ref.actor.calculate_sum_pi_squared", all=neutral(
        "computes Σπ² for verl's `optimal_token_baseline` estimators, as verl does")),
    row("actor_rollout_ref.actor.loss_scale_factor", all=neutral("scales verl's loss as verl does")),
    row("actor_rollout_ref.actor.ppo_mini_batch_size", all=tested(RECO, BOT_V1, note="the `reco` loss acts from the "
                                                                  "second mini-batch (it warns when there is one)")),
    row("actor_rollout_ref.actor.ppo_epochs", all=neutral(
        "updates per batch: verl-bot's advantages stay the batch's (the `reco` loss acts on later epochs too)")),
    row("actor_rollout_ref.actor.use_dynamic_bsz", all=tested(BOT_REACT, VPS, GRAIL,
                                                              note="the recipes pack micro-batches by tokens")),
    row("actor_rollout_ref.actor.ulysses_sequence_parallel_size", all=neutral(
        "splits each sequence of the actor's forward over ranks; verl-bot's (B, T) advantages and the `reco` "
        "loss's per-token factor are split as verl splits its own"),
        grail=refused("adv_estimator=grail with Ulysses sequence parallelism",
                      "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")),
    row("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", all=neutral(
        "as `actor_rollout_ref.actor.ulysses_sequence_parallel_size`"),
        grail=refused("adv_estimator=grail with Ulysses sequence parallelism",
                      "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2")),
    row("actor_rollout_ref.actor.fsdp_config.*", all=ENGINE),
    row("actor_rollout_ref.actor.strategy", dense=tested(*DENSE_RUNS), scalar=tested(*SCALAR_RUNS),
        verl=tested(GRPO, note="each engine: its `actor.strategy=...` row")),
    row("actor_rollout_ref.actor.use_fused_kernels", all=neutral(
        "an interpolation of `actor_rollout_ref.model.use_fused_kernels` (its row)")),
    row("actor_rollout_ref.actor.freeze_vision_tower", all=MULTI_MODAL, vps=TEXT_ONLY, grail=TEXT_ONLY),
    row("actor_rollout_ref.actor.use_prefix_grouper", all=neutral(
        "shares the prompt's forward among a group's responses in the actor: the same per-token log-probs"),
        grail=neutral("shares the prompt's forward in verl's forward; GRAIL's saliency runs its own forward before "
                      "it (`verl_bot/hooks/engine_forward_step.py`); not run with GRAIL")),
    row("actor_rollout_ref.actor.*", all=ENGINE),
    # the reference policy
    row("actor_rollout_ref.ref.*", all=REFERENCE),
    # the model
    row("actor_rollout_ref.model.path", dense=tested(*DENSE_RUNS), scalar=tested(*SCALAR_RUNS), verl=tested(GRPO)),
    row("actor_rollout_ref.model.tokenizer_path", all=neutral(
        "verl-bot decodes responses with the tokenizer verl loads (a local folder's chat template checked at "
        "start-up)")),
    row("actor_rollout_ref.model.custom_chat_template", all=neutral("read by the start-up check as verl reads it")),
    row("actor_rollout_ref.model.lora_rank", all=tested(BOT_LORA, note="verl's vLLM rollout; refused unmerged on "
                                                        "verl-bot's CPU `hf` rollout")),
    row(*(f"actor_rollout_ref.model.{name}" for name in ("lora.*", "lora_alpha", "lora_adapter_path",
                                                         "target_modules", "exclude_modules")), all=tested(BOT_LORA)),
    row("actor_rollout_ref.model.use_fused_kernels", all=neutral(
        "fused log-prob kernels: the same per-token log-probs reach verl's loss"),
        grail=refused("adv_estimator=grail with actor_rollout_ref.model.use_fused_kernels=true",
                      "actor_rollout_ref.model.use_fused_kernels=true")),
    row("actor_rollout_ref.model.fused_kernel_options.*", all=neutral("the knobs of `use_fused_kernels`")),
    row("actor_rollout_ref.model.use_remove_padding", all=tested(BOT_REACT, VPS, GRAIL,
                                                                 note="the recipes' packed sequences")),
    row("actor_rollout_ref.model.*", all=ENGINE),
    # the rollout
    row("actor_rollout_ref.rollout.name", dense=tested(BOT_LEGACY, BOT_REACT), scalar=tested(VPS, GRAIL),
        verl=tested(GRPO, note="each engine: its `rollout.name=...` row")),
    row("actor_rollout_ref.rollout.n", all=neutral(
        "the group (a prompt's responses, one `uid`): every verl-bot estimator groups by uid as verl's do")),
    row("actor_rollout_ref.rollout.agent.default_agent_loop", dense=tested(BOT_TOOL, BOT_MULTI_OUTPUT),
        vps=tested(VPS, note="its own `vps_single_turn` loop, refused without it"), all=VERL_OWN),
    row("actor_rollout_ref.rollout.agent.*", all=tested(BOT_TOOL, BOT_MULTI_OUTPUT, note="agent loops of verl "
                                                        "and of a test's own config file")),
    row("actor_rollout_ref.rollout.multi_turn.enable", dense=tested(BOT_TOOL, note="per-turn credit"),
        pure=refused("adv_estimator=pure: blank-line steps also occur in tool responses",
                     "actor_rollout_ref.rollout.multi_turn.enable=true"),
        all=neutral("tool replies are context tokens: the `bot` manager gives them no local signal; not run with "
                    "this group")),
    row("actor_rollout_ref.rollout.multi_turn.*", all=tested(BOT_TOOL)),
    row("actor_rollout_ref.rollout.full_determinism", all=tested(BOT_RESUME, note="bit-equal reruns and resumes: "
                                                                 "the replay buffer's rows in one order")),
    row("actor_rollout_ref.rollout.calculate_log_probs", all=tested(BOT_LORA, GRPO, note="rollout log-probs "
                                                                   "(verl's rollout-probs diagnostics)")),
    row("actor_rollout_ref.rollout.checkpoint_engine.*", all=neutral(
        "how weights reach the rollout (`separate_async` needs a GPU transport: its trainer-mode row)")),
    row("actor_rollout_ref.rollout.free_cache_engine", all=SERVING),
    row("actor_rollout_ref.rollout.max_model_len", all=neutral(
        "the rollout's context, as verl reads it (a LongRoPE model whose rollout and trainer would rotate "
        "differently is refused for its model: `verl_bot/launch/families.py`)")),
    row("actor_rollout_ref.rollout.logprobs_mode", all=neutral("which log-probs the rollout reports (diagnostics, "
                                                                "rollout correction): as verl reads them")),
    row("actor_rollout_ref.rollout.val_kwargs.*", all=neutral(
        "validation sampling: validation scores with the `bot` manager as training does")),
    row("actor_rollout_ref.rollout.trace.*", all=OBSERVES),
    row("actor_rollout_ref.rollout.prometheus.*", all=OBSERVES),
    row("actor_rollout_ref.rollout.disable_log_stats", all=OBSERVES),
    row("actor_rollout_ref.rollout.moe_load_balance_metrics_interval", all=OBSERVES),
    *(row(f"actor_rollout_ref.rollout.{name}", all=SAMPLING)
      for name in ("temperature", "top_p", "top_k", "do_sample", "ignore_eos", "seed", "prompt_length",
                   "response_length", "over_sample_rate")),
    row("actor_rollout_ref.rollout.*", all=SERVING),
    row("actor_rollout_ref.*", all=PLACEMENT),
    # the critic
    row("critic.*", all=CRITIC, gae=tested(RETURNS, note="PPO's critic")),
    # the reward
    row("reward.reward_manager.name", all=tested(*DENSE_RUNS, *SCALAR_RUNS, GRPO, note="`bot`; another manager with "
                                                 "a dense estimator is refused (no reward on every token)")),
    row("reward.reward_manager.*", all=neutral("where verl finds the manager named (`register`: its registry, "
                                               "where verl-bot's `bot` is)")),
    row("reward.custom_reward_function.*", all=tested(VERL_SCORER, note="G from the user's function, through "
                                                        "verl's RewardLoopWorker")),
    row("reward.reward_model.*", dense=tested(BOT_PRM, note="the served step PRM; what cannot work is refused "
                                              "(docs/prm.md)"), all=refused(
        "reward.reward_model.enable=true with the bot manager needs", "reward.reward_model.enable=true")),
    row("reward.sandbox_fusion.*", all=neutral("verl's code sandbox, passed to verl's `default_compute_score` as "
                                               "verl's managers pass it")),
    row("reward.num_workers", all=PLACEMENT),
    row("reward_model.*", all=neutral("verl's legacy reward-model keys, migrated into `reward.*` by verl")),
    row("custom_reward_function.*", all=neutral("verl's legacy keys, migrated into `reward.*` by verl")),
    row("sandbox_fusion.*", all=neutral("verl's legacy keys, migrated into `reward.*` by verl")),
    # data
    row(*(f"data.{name}" for name in ("image_key", "video_key", "audio_key", "image_patch_size", "mm_processor_kwargs",
                                      "return_multi_modal_inputs")), all=MULTI_MODAL, vps=TEXT_ONLY, grail=TEXT_ONLY),
    row("data.train_files", all=tested(*DENSE_RUNS, *SCALAR_RUNS, GRPO, note="their `data_source`s checked against "
                                         "the scorers at start-up")),
    row("data.val_files", all=tested(BOT_REACT, note="validation scored by the `bot` manager")),
    row("data.custom_cls.*", all=neutral("a dataset class of the user's: its rows' data sources are checked when "
                                         "scored, not at start-up")),
    row("data.reward_fn_key", all=neutral("read by verl's legacy managers only; verl's reward loop reads "
                                          "`data_source`, as the `bot` manager does")),
    row("data.apply_chat_template_kwargs", all=neutral("verl's prompt formatting; the `bot` manager passes them to "
                                                       "the tokenizer as verl does")),
    row("data.tool_config_path", "data.function_tool_path", all=tested(BOT_TOOL)),
    row("data.*", all=SAMPLING),
    # distillation
    row("distillation.*", dense=neutral("verl's distillation loss beside the policy loss over verl-bot's "
                                        "advantages; not run with verl-bot"),
        reco=refused("policy_loss.loss_mode=reco with distillation.enabled=true", "distillation.enabled=true"),
        vps=neutral("verl's distillation loss beside the policy loss over GRPO-VPS's advantages; not run with it"),
        grail=refused("adv_estimator=grail with distillation.enabled=true", "distillation.enabled=true"),
        verl=VERL_OWN),
    # the trainer
    row("trainer.use_v1", dense=tested(BOT_LEGACY, note="`false`: verl's legacy `RayPPOTrainer`"),
        reco=neutral("`false`: run by hand 2026-12-04 (docs/verl_versions.md)"),
        vps=neutral("`false`: run by hand 2026-12-04 (docs/verl_versions.md)"),
        grail=tested("tests/component/test_grail_engine.py::test_the_legacy_trainers_layout_gives_the_same_weights_and_"
                     "gradients", note="`false`: the legacy update's right-padded span codes; run by hand 2026-12-05 "
                     "(docs/verl_versions.md)"),
        verl=tested(LEGACY_SCALAR)),
    row("trainer.v1.trainer_mode", dense=tested(BOT_COLOCATE), all=tested(
        *SCALAR_RUNS, GRPO, note="`sync`; each mode: its `trainer.v1.trainer_mode=...` row")),
    row("trainer.v1.separate_async.*", all=neutral("the `separate_async` trainer's knobs: its trainer-mode row")),
    row("trainer.v1.colocate_async.*", all=neutral("the `colocate_async` trainer's knobs: its trainer-mode row")),
    row("trainer.v1.sampler.*", all=neutral(
        "which prompts a step samples and how stale rollouts are dropped: the batches are scored and credited the "
        "same way")),
    row("trainer.v1.*", all=VERL_OWN),
    row("trainer.logger", all=tested(BOT_RESUME, note="console, file, wandb and tensorboard: verl-bot adds its "
                                                      "panels to the trackers named")),
    row("trainer.total_training_steps", all=neutral("read by the token-report knobs' check as verl reads it")),
    row("trainer.balance_batch", all=neutral(
        "reorders the batch's rows over ranks; verl-bot's batch context follows each row by its key")),
    row("trainer.critic_warmup", "trainer.max_critic_ckpt_to_keep", all=CRITIC),
    row(*(f"trainer.{name}" for name in ("resume_mode", "resume_from_path", "save_freq", "max_actor_ckpt_to_keep",
                                         "default_local_dir", "default_hdfs_dir", "del_local_ckpt_after_load",
                                         "checkpoint_callback_class")), all=CHECKPOINT),
    row("trainer.*", all=PLACEMENT),
    # verl's other subtrees
    row("ray_kwargs.*", all=PLACEMENT),
    row("transfer_queue.*", all=neutral("the v1 trainer's data plane: verl-bot's rows travel in it as verl's do")),
    row("skip.*", all=neutral(
        "replays rollouts verl dumped (`verl.utils.skip`) in place of sampling: what the dump holds reaches the "
        "step; not run with verl-bot")),
)
ROWS: tuple[Row, ...] = (*CHOICE_ROWS, *KEY_ROWS)


# ------------------------------------------------------------------------------------------ the refusals
SEQUENCE_LOSSES = {"geo_mean": "verl's GMPO loss averages each response's advantages into one"}
TOKEN_CREDIT = ("bot", "pure", "pass", "vps", "grail", "turn_bot", "turn_index_biased")  # per-token credit
TEXT_ONLY_METHODS = {
    "vps": "its belief probes send the prompt's token ids without its images",
    "grail": "its saliency is computed for text-only models (verl_bot/hooks/engine_forward_step.py)",
}
MODALITY_KEYS = ("vision_config", "audio_config")  # a multi-modal model's HF config has one


def _estimator(config: Any) -> str:
    return str(getattr(config.algorithm.adv_estimator, "value", config.algorithm.adv_estimator))


def entry_module_problem(config: Any) -> str | None:
    """The refusal of an entry module whose row refuses the run's estimator, known by the top-level keys only its
    config has (`EntryRow.marks`; the entry with the most of them present)."""
    found = [e for e in ENTRIES if e.marks and all(m in config for m in e.marks)]
    entry = max(found, key=lambda e: len(e.marks), default=None)
    cell = answer(entry.cells, _estimator(config)) if entry is not None else None
    if cell is None or cell.status != REFUSED:
        return None
    return (
        f"{entry.module} (its config's top-level {', '.join(entry.marks)}) with verl-bot: {cell.text}; run "
        "verl-bot with python -m verl.trainer.main_ppo (trainer.v1.trainer_mode=colocate_async or separate_async "
        "also sample ahead of training)"
    )


def sequence_loss_problem(config: Any) -> str | None:
    """A verl loss that reduces each response's advantages to one, with a method whose credit is per token."""
    actor = config.actor_rollout_ref.actor
    loss, estimator = str((actor.get("policy_loss") or {}).get("loss_mode", "vanilla")), _estimator(config)
    if loss not in SEQUENCE_LOSSES or estimator not in TOKEN_CREDIT:
        return None
    return (
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss} with adv_estimator={estimator}: "
        f"{SEQUENCE_LOSSES[loss]}, which loses {estimator}'s per-token credit; use policy_loss.loss_mode=vanilla "
        "(or another loss that weighs each token by its own advantage)"
    )


def text_only_problem(config: Any) -> str | None:
    """A multi-modal model (its HF config has a vision or audio part) with a method that needs a text-only one."""
    from verl_bot.launch.families import read_hf_config

    estimator = _estimator(config)
    path = str((config.actor_rollout_ref.get("model") or {}).get("path", "") or "")
    if estimator not in TEXT_ONLY_METHODS or not path:
        return None
    hf_config = read_hf_config(path) or {}
    modality = next((key for key in MODALITY_KEYS if key in hf_config), None)
    if modality is None:
        return None
    return (
        f"adv_estimator={estimator} needs a text-only model: {path} has a {modality} (a multi-modal model), and "
        f"{TEXT_ONLY_METHODS[estimator]}; use a text-only model or another estimator"
    )


PROBLEMS = (entry_module_problem, sequence_loss_problem, text_only_problem)


def surface_problem(config: Any) -> str | None:
    """The first refusal of this table that no other start-up check makes (`PROBLEMS`), or None."""
    return next((problem for check in PROBLEMS if (problem := check(config))), None)


# ------------------------------------------------------------------------------------------ the page
PAGE = Path(__file__).resolve().parents[2] / "docs" / "verl_settings.md"
COMMAND = "python -m verl_bot.launch.verl_surface --write"
SAME = "same"
PREAMBLE = f"""# verl's settings with verl-bot

Every setting of the installed verl that could change what reaches a reward, an advantage, a loss or a batch, and every
entry module, classified for each verl-bot method. Generated from `verl_bot/launch/verl_surface.py` by
`{COMMAND}`: the keys are read from verl's own config schema (each entry module's default config composed by
Hydra with each option of verl's `model_engine` group), the entry modules and the choices (estimators, losses,
rollout engines, engines, trainer modes) from verl's source (`verl_bot/launch/verl_schema.py`).
`tests/repo/test_verl_surface.py` fails when the installed verl has a key, an entry module or a choice this table
does not classify, naming it: after a verl upgrade, that test says what is new.

How a row applies: the first row whose pattern matches a key classifies it; a row with a condition (*with ...*)
answers under that setting only. A column's cell applies to each method of its group unless a method's own line
follows it; `{SAME}`: as the column before; `-`: does not apply (the row picks another group's estimator).

Statuses:

{{statuses}}

Columns (each method as these overrides on verl's default config):

{{groups}}
"""


def _pattern(pattern: str) -> str:
    if pattern.startswith("*.") and pattern.endswith(".*"):
        return f"every `{pattern[2:-2]}` subtree"
    if pattern.startswith("*."):
        return f"every `{pattern[2:]}` key"
    if pattern.endswith(".*"):
        return f"`{pattern[:-2]}` and below"
    return f"`{pattern}`"


def _cell(answer_: Answer) -> str:
    tests = "; ".join(f"`{t}`" for t in answer_.tests) or "; ".join(f"`{e}`" for e in answer_.example)
    text = f"{answer_.text}" if answer_.status != REFUSED else f"`{answer_.text} ...`"
    parts = [f"**{answer_.status}**", text, tests if answer_.status == TESTED else ""]
    return ": ".join(p for p in parts[:2] if p) + (f" ({parts[2]})" if parts[2] else "")


def _column(cells: Mapping[str, Answer], group: str) -> str:
    main = cells.get(group) or cells.get("all")
    own = [(name, a) for name, a in cells.items()
           if name not in GROUPS and name != "all" and GROUP_OF.get(name, VERL_GROUP) == group]
    lines = ([_cell(main)] if main else []) + [f"`{name}`: {_cell(a)}" for name, a in own]
    return "<br>".join(lines).replace("|", "\\|") or "-"


def _columns(cells: Mapping[str, Answer]) -> list[str]:
    """The row's cells, one per group; a cell equal to the one before it reads `same`."""
    columns = [_column(cells, g) for g in GROUPS]
    return [c if i == 0 or c != columns[i - 1] else SAME for i, c in enumerate(columns)]


def _table(first: str, lines: list[tuple[str, Mapping[str, Answer]]]) -> str:
    head = f"| {first} | " + " | ".join(GROUPS) + " |\n|---|" + "---|" * len(GROUPS)
    body = [f"| {label} | " + " | ".join(_columns(cells)) + " |" for label, cells in lines]
    return "\n".join([head, *body])


COVERS = {"keys": "", "own": " (and the keys its config adds)", "all": " (and its whole config)"}


def document() -> str:
    """docs/verl_settings.md: the preamble and the three tables (entry modules, choices, config keys)."""
    statuses = "\n".join(f"- **{name}**: {text}" for name, text in STATUSES.items())
    groups = "\n".join(f"- **{name}**: {text}" for name, text in GROUPS.items())
    entries = [(f"`{e.module}`{COVERS[e.covers]}" + (f": {e.note}" if e.note else ""), e.cells) for e in ENTRIES]
    def label(r: Row) -> str:
        return ", ".join(_pattern(p) for p in r.patterns) + (f", *with* `{r.when}`" if r.when else "")
    return "\n\n".join([
        PREAMBLE.format(statuses=statuses, groups=groups).rstrip(),
        "## Entry modules", _table("entry module", entries),
        "## Choices: the settings that pick a code path", _table("setting", [(label(r), r.cells) for r in CHOICE_ROWS]),
        "## Config keys", _table("key", [(label(r), r.cells) for r in KEY_ROWS]),
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_bot.launch.verl_surface", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"write {PAGE.name} (else print it)")
    args = parser.parse_args(argv)
    if args.write:
        PAGE.write_text(document(), encoding="utf-8")
    else:
        sys.stdout.write(document())
    return 0


if __name__ == "__main__":
    sys.exit(main())
