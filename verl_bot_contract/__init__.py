"""The wire contract between verl-bot and its reward servers, written once.

- `verdict`: what a scorer answers for one rollout (docs/REWARD_API.md) and its one validator;
- `steps`: the one step splitter; `think`: the one think-block split;
- `loopback`: which hosts are this machine.

Standard library only: the plugin (`verl_bot`, which imports verl) and the reward servers (`reward_servers`, which
run without verl) both import it, and neither imports the other's dependencies through it.
"""
