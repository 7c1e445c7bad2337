"""Every node of a multi-node run reaches every reward server and judge: shown before step 1, from each node.

On several nodes verl's reward-loop workers run on every node and call the reward servers; a server on an address
only some nodes reach (a loopback address, a firewalled port) fails every rollout the others score, each scored 0,
and the run trains on. `check_nodes` runs one Ray task pinned to each alive node that GETs every URL (`targets`: the
config's reward servers' `/health`, and `VERL_BOT_REACH_URLS`); any HTTP answer shows the node reaches it, and the
first URL a node cannot reach stops the run with one line naming the node and the URL. Run by
`verl_bot.hooks.node_reach` at the start of verl's `PPOTrainer.init`: docs/recipes.md, section Node plan (Several
nodes); docs/knobs.md (`VERL_BOT_REACH_URLS`).
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from verl_bot.errors import VerlBotConfigError

REACH_ENV = "VERL_BOT_REACH_URLS"
TIMEOUT_S = 10.0


def probe(url: str, timeout_s: float = TIMEOUT_S) -> str | None:
    """None when `url` answers HTTP (whatever its status), else why it does not."""
    try:
        urllib.request.urlopen(url, timeout=timeout_s).close()  # noqa: S310 - the run's own URLs
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", None) or exc)
    return None


def node_report(urls: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> tuple[str, list[tuple[str, str, str]]]:
    """(this host's name, (what, URL, why) of each URL it cannot reach): the task each node runs."""
    return socket.gethostname(), [(what, url, why) for what, url in urls.items()
                                  if (why := probe(url, timeout_s)) is not None]


def reach_message(node: str, what: str, url: str, why: str) -> str:
    """The one line of a URL a node cannot reach."""
    return (
        f"node {node} cannot reach {what} at {url} ({why}): the run calls it from every node; serve it on an "
        "address and port every node reaches (the recipes: REWARD_HOST, the judges' URLs)"
    )


def check_nodes(urls: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> int:
    """Raise `VerlBotConfigError` (one line) for the first alive node of the Ray cluster that cannot reach one of
    `urls` (what -> URL); returns the number of nodes checked."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0)(node_report)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [
        (n["NodeManagerAddress"], task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(dict(urls), timeout_s))
        for n in nodes
    ]
    for address, ref in refs:
        host, failures = ray.get(ref, timeout=timeout_s * max(len(urls), 1) + 60)
        if failures:
            raise VerlBotConfigError(reach_message(f"{address} ({host})", *failures[0]))
    return len(nodes)


def targets(config: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What -> URL to GET: the run's reward servers (`<url>/health`) and the entries of `VERL_BOT_REACH_URLS`."""
    from verl_bot.rewards.scorers import HttpScorer, build_scorers
    from verl_bot.rewards.settings import bot_manager_in_use, manager_settings

    found: dict[str, str] = {}
    if bot_manager_in_use(config):
        settings = manager_settings(config)
        for source, scorer in build_scorers(settings.scorers).items():
            if isinstance(scorer, HttpScorer):
                found |= {f"the reward server of {source} ({i + 1})": f"{url}/health"
                          for i, url in enumerate(scorer.urls)}
    for entry in (environ if environ is not None else os.environ).get(REACH_ENV, "").split():
        name, _, url = entry.partition("=")
        if url:
            found[name] = url
    return found


def several_nodes(config: Any) -> bool:
    """A run of more than one node: `trainer.nnodes` > 1 or a Ray cluster with more than one alive node."""
    import ray

    nnodes = int((config.get("trainer") or {}).get("nnodes", 1) or 1)
    return nnodes > 1 or sum(1 for n in ray.nodes() if n.get("Alive")) > 1
