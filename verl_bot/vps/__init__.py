"""GRPO-VPS's rollout side: the belief probes and the `vps_single_turn` agent loop that runs them (its estimator
is `verl_bot.advantage.vps`, beside the others)."""
