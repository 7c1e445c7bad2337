# shellcheck shell=bash
# Sourced by recipes/common.sh (the six GPU recipes) and recipes/cpu_train.sh (the CPU runs): every ALGO's Hydra
# overrides and knobs, in one place, so that an algorithm is the same on a GPU node and on a laptop.
#
# The sourcing recipe sets, before sourcing:
#   ALGO, TASK, MAX_RESPONSE_LENGTH
#   HAS_ANSWER    1: every prompt has one correct answer (reward_model.ground_truth) and the responses end in
#                 <final>...</final> (AIME, toy_math); 0: not (React, toy_lint); vps and grail need 1
#   ANSWER_TASKS  where vps and grail do run, for the refusal ("the AIME recipes", "TASK=toy_math")
#   any knob below whose default it wants to change (${VAR:-default}: the environment wins)
#   vb_die        prints its one-line refusal and exits 2
# then calls vb_algo_overrides, which fills the bash array ALGO_OVERRIDES, and, on its whole command line,
# vb_user_wins, so that the user's own overrides ("$@", last) win over every one of the recipe's.

GSPO_CLIP_LOW=${GSPO_CLIP_LOW:-3e-4}     # GSPO paper
GSPO_CLIP_HIGH=${GSPO_CLIP_HIGH:-4e-4}   # GSPO paper
DAPO_CLIP_LOW=${DAPO_CLIP_LOW:-0.2}      # DAPO paper
DAPO_CLIP_HIGH=${DAPO_CLIP_HIGH:-0.28}   # DAPO paper
# DAPO overlong shaping: cache zone L_c. DAPO used 4096 of 20480 (1/5); ours: a quarter of the length.
OVERLONG_BUFFER_LEN=${OVERLONG_BUFFER_LEN:-$((MAX_RESPONSE_LENGTH / 4))}
OVERLONG_PENALTY_FACTOR=${OVERLONG_PENALTY_FACTOR:-1.0}
DAPO_FILTER_METRIC=${DAPO_FILTER_METRIC:-acc}     # reward_extra_info key: the outcome (solved/compiled), as DAPO filters
PURE_TEMPERATURE=${PURE_TEMPERATURE:-0.1}          # PURE paper: softmax temperature of the min-form transform
PURE_OUTCOME_COEF=${PURE_OUTCOME_COEF:-1.0}        # weight of the verifiable reward at EOS (our choice: 1)
PURE_STEP_SCALE=${PURE_STEP_SCALE:-1.0}            # step value = clip(scale * mean S_t of the step, -1, 1) (per task)
# PASS knobs (arXiv 2606.29296 gives none; these are our reconstruction's defaults, docs/knobs.md)
PASS_FORMAT_COEF=${PASS_FORMAT_COEF:-1.0}          # lambda_f, weight of the standardized format stream
PASS_PROCESS_COEF=${PASS_PROCESS_COEF:-1.0}        # lambda_p, weight of the standardized process density
PASS_DEAD_ZONE=${PASS_DEAD_ZONE:-0.0}              # delta: |S_t| < delta counts as 0 when chunks are formed
PASS_MIN_CHUNK=${PASS_MIN_CHUNK:-1}                # m_min: shorter sign runs join the chunk before them
PASS_DENSITY=${PASS_DENSITY:-suffix}               # suffix | sequence | chunk (Divide-Length)
PASS_OP=${PASS_OP:-grpo}                           # grpo (mean/std) | drgrpo (mean only)
# GRPO-VPS knobs (the paper does not state them; ours, docs/knobs.md)
VPS_ALPHA=${VPS_ALPHA:-0.5}                        # weight of the belief progress
VPS_MAX_CUTS=${VPS_MAX_CUTS:-8}                    # probes per rollout = cuts + 1
VPS_MIN_GAP=${VPS_MIN_GAP:-64}                     # tokens between cuts
VPS_CUT_QUANTILE=${VPS_CUT_QUANTILE:-0.1}          # cut candidates: the top 10% surprisal tokens
VPS_SPACE=${VPS_SPACE:-prob}                       # progress of p(answer) (prob) or of log p (log)
RECO_W_MAX=${RECO_W_MAX:-5.0}                      # ReCo: clip of the response weights (a reimplementation's 5)
RECO_OCCURRENCE=${RECO_OCCURRENCE:-count_model}     # ReCo: occurrence = copies in the group x model probability (ours)

vb_algo_overrides() {
    case "${ALGO}" in
        bot)
            # BoT-GRPO (the paper): dense r_t = w_g*G + w_s*S_t, per-token advantages, the paper's loss.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=bot
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=true
            )
            ;;
        grpo)
            # GRPO: the same global signals, no local ones (one scalar G on the last token).
            # Same loss aggregation as BoT so that only the credit assignment differs (our choice).
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=grpo
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
            )
            ;;
        gspo)
            # GSPO: verl's `gspo` policy loss with the GSPO paper's clip ranges. verl implements the
            # GSPO-token ratio s_i,t = sg[s_i] * pi_t / sg[pi_t]: with GRPO's per-sequence advantages it
            # is GSPO; GSPO_TOKEN=1 pairs it with BoT's per-token advantages (the token-level variant).
            ALGO_OVERRIDES=(
                actor_rollout_ref.actor.policy_loss.loss_mode=gspo
                "actor_rollout_ref.actor.clip_ratio_low=${GSPO_CLIP_LOW}"
                "actor_rollout_ref.actor.clip_ratio_high=${GSPO_CLIP_HIGH}"
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
            )
            if [[ "${GSPO_TOKEN:-0}" == 1 ]]; then
                ALGO_OVERRIDES+=(algorithm.adv_estimator=bot +reward.reward_kwargs.bot.token_level=true)
            else
                ALGO_OVERRIDES+=(algorithm.adv_estimator=grpo +reward.reward_kwargs.bot.token_level=false)
            fi
            ;;
        dapo)
            # DAPO, all in verl core: clip-higher, dynamic sampling (the v1 replay buffer drops groups
            # whose G is all equal and refills the batch), token-mean loss, no KL, overlong shaping
            # (verl's keys; the bot reward manager adds the penalty to G, as verl's `dapo` manager does).
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=grpo
                "actor_rollout_ref.actor.clip_ratio_low=${DAPO_CLIP_LOW}"
                "actor_rollout_ref.actor.clip_ratio_high=${DAPO_CLIP_HIGH}"
                actor_rollout_ref.actor.loss_agg_mode=token-mean
                actor_rollout_ref.actor.use_kl_loss=False
                actor_rollout_ref.actor.kl_loss_coef=0.0
                algorithm.use_kl_in_reward=False
                algorithm.filter_groups.enable=True
                "algorithm.filter_groups.metric=${DAPO_FILTER_METRIC}"
                +reward.reward_kwargs.bot.token_level=false
                +reward.reward_kwargs.overlong_buffer_cfg.enable=True
                "+reward.reward_kwargs.overlong_buffer_cfg.len=${OVERLONG_BUFFER_LEN}"
                "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=${OVERLONG_PENALTY_FACTOR}"
                +reward.reward_kwargs.overlong_buffer_cfg.log=True
                "+reward.reward_kwargs.max_resp_len=${MAX_RESPONSE_LENGTH}"
            )
            ;;
        vps)
            # GRPO-VPS: GRPO on the scalar G plus alpha x the progress of the model's belief in the correct answer
            # per segment, probed on the rollout server by the vps_single_turn agent loop (`<final>` template).
            [[ "${HAS_ANSWER}" == 1 ]] || vb_die "ALGO=vps probes the model's belief in one correct answer" \
                "(reward_model.ground_truth); ${TASK} prompts have no single correct answer: use it with ${ANSWER_TASKS}"
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=vps
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
                actor_rollout_ref.rollout.agent.default_agent_loop=vps_single_turn
                "+algorithm.vps_alpha=${VPS_ALPHA}"
                "+algorithm.vps_max_cuts=${VPS_MAX_CUTS}"
                "+algorithm.vps_min_gap=${VPS_MIN_GAP}"
                "+algorithm.vps_cut_quantile=${VPS_CUT_QUANTILE}"
                "+algorithm.vps_space=${VPS_SPACE}"
                +algorithm.vps_template=final
            )
            ;;
        pure)
            # PURE: min-form credit over process rewards (verl-bot's `pure` estimator). It reads the bot
            # manager's reward streams (local S_t, step ends, solved), not the composed r_t.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=pure
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                algorithm.use_kl_in_reward=False
                +reward.reward_kwargs.bot.token_level=true
                "+algorithm.pure_temperature=${PURE_TEMPERATURE}"
                "+algorithm.pure_outcome_coef=${PURE_OUTCOME_COEF}"
                "+algorithm.pure_step_scale=${PURE_STEP_SCALE}"
            )
            ;;
        pass)
            # PASS (verl-bot's reconstruction from the abstract): the bot manager's process (local S_t), outcome
            # (solved) and format streams, each standardized in its group, fused into per-token advantages.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=pass
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                algorithm.use_kl_in_reward=False
                +reward.reward_kwargs.bot.token_level=true
                "+algorithm.pass_format_coef=${PASS_FORMAT_COEF}"
                "+algorithm.pass_process_coef=${PASS_PROCESS_COEF}"
                "+algorithm.pass_dead_zone=${PASS_DEAD_ZONE}"
                "+algorithm.pass_min_chunk=${PASS_MIN_CHUNK}"
                "+algorithm.pass_density=${PASS_DENSITY}"
                "+algorithm.pass_op=${PASS_OP}"
            )
            ;;
        reco)
            # ReCo: GRPO's advantage on G times response weights 1/(K pi_hat) (verl-bot's `reco` estimator)
            # and the Bernoulli-variance ratio as a token coefficient on verl's PPO loss (`reco` loss); the
            # same loss aggregation as grpo (our choice). RECO_MINI_BATCHES updates per step.
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=reco
                actor_rollout_ref.actor.policy_loss.loss_mode=reco
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
                "+algorithm.reco_w_max=${RECO_W_MAX}"
                "+algorithm.reco_occurrence=${RECO_OCCURRENCE}"
            )
            ;;
        grail)
            # GRAIL (arXiv 2606.04889): GRPO's advantage times per-token weights from the saliency of the
            # final answer, computed in the actor update (verl-bot's hooks, FSDP2 engine only); the authors'
            # yaml values are the defaults of its knobs (+algorithm.grail_*=...). It needs one final answer
            # per response (<final>...</final>).
            [[ "${HAS_ANSWER}" == 1 ]] || vb_die "ALGO=grail needs one final answer per response (<final>...</final>);" \
                "${TASK} responses have none: use it with ${ANSWER_TASKS}"
            ALGO_OVERRIDES=(
                algorithm.adv_estimator=grail
                actor_rollout_ref.actor.strategy=fsdp2
                actor_rollout_ref.ref.strategy=fsdp2
                actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
                +reward.reward_kwargs.bot.token_level=false
            )
            ;;
        *)
            vb_die "ALGO must be one of bot, grpo, gspo, dapo, pure, pass, reco, vps, grail; got '${ALGO}'"
            ;;
    esac
}

# The user's overrides win. Hydra applies overrides in order, so a user's `key=`, `++key=` or `~key` after ours
# already does; a user's `+key=` (append) is refused when the recipe appended that key first (the knobs above,
# the bot manager's settings). Drop from the array named $1 every override whose key the remaining arguments
# append with `+key=`.
vb_user_wins() {
    local -n vb_list=$1
    shift
    local -A appended=()
    local arg key kept=()
    for arg in "$@"; do
        [[ "${arg}" == +[!+]*=* ]] || continue
        key=${arg%%=*}
        appended[${key#+}]=1
    done
    for arg in "${vb_list[@]}"; do
        key=${arg%%=*}
        key=${key#+}
        [[ -n "${appended[${key#+}]:-}" ]] || kept+=("${arg}")
    done
    vb_list=("${kept[@]}")
}
