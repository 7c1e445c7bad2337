"""How a recipe reads its settings from the environment, and how it refuses.

Every setting is an environment variable with a default, read as bash's `${VAR:-default}` reads it: an empty
value is unset. A refusal is one line (`Refusal`), which the entry prints after its prefix (`recipe: `,
`cpu_train.sh: `) before it exits with 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository the recipes run from


class Refusal(Exception):
    """What cannot run, in one line: the recipe stops before anything starts (exit code 2)."""


class Env:
    """The environment as the recipes read it (`get`: an empty value is unset); `values` is the process's."""

    def __init__(self, values: Mapping[str, str]):
        self.values = dict(values)

    def get(self, name: str, default: object = "") -> str:
        return self.values.get(name) or str(default)

    def int(self, name: str, default: int) -> int:
        """An integer setting; a value that is not one is refused in one line."""
        text = self.get(name, default)
        try:
            return int(text)
        except ValueError:
            raise Refusal(f"{name} must be an integer, got '{text}'") from None

    def flag(self, name: str, default: str = "0") -> bool:
        """A 0/1 switch: on when it is 1."""
        return self.get(name, default) == "1"
