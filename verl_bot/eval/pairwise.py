"""Pairwise VLM win rate with 4 rounds in ABBA order (arXiv 2610.09804, "Evaluation"; docs/ALGORITHMS.md).

For one prompt the judge sees the prompt and the two screenshots (never the
code) four times, in the order A,B / B,A / B,A / A,B, and must pick one each
time. The majority of the rounds wins (1 for A, 0 for B); 2-2 is a tie worth
0.5 to each. A round whose answer cannot be parsed counts for neither side
(so 2-1 with one unparseable round is still a win). Over prompts:
win rate = mean score of A, tie rate = share of ties.

The judge is any OpenAI-compatible vision endpoint (`vllm serve`), reached
with `reward_servers.common.judge.JudgeClient`; prompts live in
`verl_bot/eval/prompts/pairwise_*.md`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

ROUNDS: tuple[str, ...] = ("AB", "BA", "BA", "AB")  # which run's screenshot is shown first in each round
PROMPTS = Path(__file__).with_name("prompts")
_PICK = re.compile(r"\b(FIRST|SECOND)\b", re.IGNORECASE)


def parse_pick(text: str) -> int | None:
    """0 for FIRST, 1 for SECOND (the last such word in the answer), None when there is neither."""
    picks = _PICK.findall(text or "")
    return None if not picks else (0 if picks[-1].upper() == "FIRST" else 1)


def round_winner(order: str, pick: int | None) -> str | None:
    """'A' or 'B': the run whose screenshot was at position `pick` in a round shown in `order`."""
    return None if pick is None else order[pick]


def abba_score(winners: Sequence[str | None]) -> float:
    """Score of run A for one prompt: 1.0 if A wins more rounds than B, 0.0 if fewer, 0.5 on a tie."""
    a, b = sum(w == "A" for w in winners), sum(w == "B" for w in winners)
    return 1.0 if a > b else 0.0 if b > a else 0.5


def win_rate(scores: Sequence[float]) -> tuple[float, float]:
    """(win rate of A, tie rate) over prompts' ABBA scores."""
    if not scores:
        raise ValueError("win_rate needs at least one prompt")
    return sum(scores) / len(scores), sum(s == 0.5 for s in scores) / len(scores)


async def judge_pair(client, prompt: str, png_a: bytes, png_b: bytes) -> tuple[float, list[str | None]]:
    """Run the 4 ABBA rounds for one prompt with a `JudgeClient`; returns (A's score, the round winners).

    A judge error in a round (unreachable after retries, bad response) counts as an unparseable round.
    """
    from reward_servers.common.judge import JudgeError, user_message

    system = (PROMPTS / "pairwise_system.md").read_text()
    user = (PROMPTS / "pairwise_user.md").read_text().format(prompt=prompt)
    shots = {"A": png_a, "B": png_b}
    winners = []
    for order in ROUNDS:
        messages = [{"role": "system", "content": system}, user_message(user, shots[order[0]], shots[order[1]])]
        try:
            pick = parse_pick(await client.chat(messages))
        except JudgeError:
            pick = None
        winners.append(round_winner(order, pick))
    return abba_score(winners), winners
