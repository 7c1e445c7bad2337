"""Pieces shared by every reward server: the HTTP service factory, the OpenAI-compatible judge client and a
deterministic fake judge for tests (what they share with verl-bot, the verdict, steps, think split and loopback rule,
is `verl_bot_contract`). See README.md in this folder."""
