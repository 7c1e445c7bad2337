"""Pieces shared by every reward server: the HTTP service factory, the OpenAI-compatible judge client and a
deterministic fake judge for tests. See README.md in this folder."""
