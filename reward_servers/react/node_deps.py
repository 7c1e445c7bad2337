"""Where the React server's Node dependencies live, and the command that installs them there.

The Node side (``node/*.mjs``: esbuild, ESLint, Tailwind, Playwright) needs the packages locked by
``package.json`` + ``package-lock.json`` in a ``node_modules`` folder. In a clone that is this folder
(``reward_servers/react/node_modules``, what ``make setup`` installs); an installed verl-bot (a wheel in
site-packages) keeps them outside site-packages, in ``$XDG_CACHE_HOME/verl-bot/react`` (``~/.cache`` when unset).
``REACT_REWARD_NODE_DIR`` names another folder, for this command and the server alike.

    python -m reward_servers.react.node_deps      # idempotent: chromium if missing, `npm ci` when the lockfile changed
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
NODE_DIR_ENV = "REACT_REWARD_NODE_DIR"


def node_dir() -> Path:
    """The folder holding ``package.json``, ``package-lock.json`` and ``node_modules`` for the Node workers:
    ``$REACT_REWARD_NODE_DIR``; else this package's folder in a source checkout (the repository's pyproject.toml two
    levels up); else the user's cache (an installed package: site-packages is no place for node_modules)."""
    if os.environ.get(NODE_DIR_ENV):
        return Path(os.environ[NODE_DIR_ENV]).expanduser().resolve()
    if (PACKAGE_DIR.parents[1] / "pyproject.toml").is_file():
        return PACKAGE_DIR
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "verl-bot" / "react"


def main() -> int:
    """Install the locked Node dependencies (and Debian's chromium when missing) into :func:`node_dir`."""
    target = node_dir()
    print(f"React reward server: Node dependencies in {target}", file=sys.stderr)
    return subprocess.run(["bash", str(PACKAGE_DIR / "setup.sh"), str(target)]).returncode


if __name__ == "__main__":
    sys.exit(main())
