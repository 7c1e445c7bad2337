"""Batch client of a REWARD_API reward server (``POST /score`` with per-call ``options``) for the evaluation CLI.

Unlike the training-time ``verl_bot.rewards.scorers.HttpScorer`` (one item per request, retries, failures turned
into a sentinel reward), evaluation sends whole batches with ``options`` (judges off, screenshots on) and stops
with an :class:`EvalError` when the server cannot be reached or answers anything but a verdict per item: a
number computed from half-scored data would be wrong silently.
"""

from __future__ import annotations

import asyncio
import json
import os

from verl_bot.eval.records import EvalError

TOKEN_ENV = "REWARD_SERVER_TOKEN"  # the servers' own bearer-token variable (reward_servers/common/service.py)


def rows_to_items(rows: list[dict]) -> list[dict]:
    """REWARD_API request items for generation rows (``id`` = "prompt_index/sample_index")."""
    return [
        {
            "id": f"{row['prompt_index']}/{row['sample_index']}",
            "prompt": row["prompt"],
            "response": row["response"],
            "ground_truth": row.get("ground_truth"),
            "extra_info": {"data_source": row.get("data_source")},
        }
        for row in rows
    ]


async def _post(session, url: str, items: list[dict], options: dict, headers: dict) -> list[dict]:
    """One /score call; the verdicts in request order."""
    import aiohttp

    try:
        async with session.post(f"{url}/score", json={"items": items, "options": options}, headers=headers) as r:
            text = await r.text()
            status = r.status
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise EvalError(f"reward server {url} unreachable: {type(e).__name__}: {e}".rstrip(": ")) from None
    if status != 200:
        raise EvalError(f"reward server {url}/score answered HTTP {status}: {text[:200]}")
    try:
        out = json.loads(text)["items"]
    except (ValueError, KeyError, TypeError):
        out = None
    if not isinstance(out, list) or len(out) != len(items):
        raise EvalError(f"reward server {url}/score did not answer one verdict per item: {text[:200]}")
    return out


async def score_rows_async(
    url: str,
    rows: list[dict],
    options: dict | None = None,
    *,
    token: str | None = None,
    batch_size: int = 32,
    concurrency: int = 2,
    timeout_s: float = 600.0,
) -> list[dict]:
    """Verdicts (REWARD_API response items) for generation rows, in row order.

    Rows go in batches of ``batch_size`` items, ``concurrency`` requests at a time. ``token`` (default: env
    REWARD_SERVER_TOKEN) is sent as a bearer token. Raises EvalError when the server is unreachable or answers
    with anything but one verdict per item.
    """
    import aiohttp

    url = url.rstrip("/")
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    items = rows_to_items(rows)
    batches = [items[i : i + batch_size] for i in range(0, len(items), max(1, batch_size))]
    sem = asyncio.Semaphore(max(1, concurrency))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s, connect=10)) as session:

        async def one(batch: list[dict]) -> list[dict]:
            async with sem:
                return await _post(session, url, batch, options or {}, headers)

        results = await asyncio.gather(*(one(b) for b in batches))
    return [verdict for batch in results for verdict in batch]


def score_rows(url: str, rows: list[dict], options: dict | None = None, **kwargs) -> list[dict]:
    """Synchronous :func:`score_rows_async` (same arguments)."""
    return asyncio.run(score_rows_async(url, rows, options, **kwargs))
