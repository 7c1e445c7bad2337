"""Pieces shared by every reward server: the HTTP service factory, the OpenAI-compatible judge client, a
deterministic fake judge for tests, the think-block split and the step splitter. See README.md in this folder."""
