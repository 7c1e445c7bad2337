"""The end-to-end modules' shared fixture `workdir` (tests/harness/trainer.py); a module may define its own."""

from tests.harness.trainer import workdir  # noqa: F401 - registered for every module of this folder
