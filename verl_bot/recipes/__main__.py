"""`python -m verl_bot.recipes NAME [OVERRIDE ...]`: what `bash recipes/NAME.sh` runs (the settings from the
environment, the overrides last); NAME is a paper recipe (`react_qwen`, ..., `aime_phi`), `cpu_train` or `cpu_demo`."""

from __future__ import annotations

import os
import sys

from verl_bot.recipes import cpu_train, demo, launch
from verl_bot.recipes.tables import RECIPES

ENTRIES = {"cpu_train": cpu_train.main, "cpu_demo": demo.main}


def main(argv: list[str]) -> int:
    if not argv or (argv[0] not in RECIPES and argv[0] not in ENTRIES):
        print(f"usage: python -m verl_bot.recipes {{{','.join([*RECIPES, *ENTRIES])}}} [OVERRIDE ...]", file=sys.stderr)
        return 2
    name, user = argv[0], argv[1:]
    if name in ENTRIES:
        return ENTRIES[name](os.environ, user)
    return launch.main(RECIPES[name], os.environ, user)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
