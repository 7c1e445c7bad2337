"""Slow references of the estimators: loops over groups, rows and tokens in Python floats, written from each
method's formulas (docs/ALGORITHMS.md), checked against hand-computed values in tests/unit/ and used as the expected
values of the estimators wherever they run (unit tests, verl's trainer end to end)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import torch

from verl_bot.advantage.pass_ import PassSettings


def reference_bot(rewards, mask, index, eps=1e-6, norm_by_std=True, length_weighting=True, std_floor=0.0):
    """Obviously-correct loop over groups and tokens, in float64 Python numbers (docs/ALGORITHMS.md Eq. 2-3).

    length_weighting=False: every token of the group weighs 1/N (plain pooling); std_floor: max(std, floor).
    """
    rewards = rewards.double().tolist()
    mask = mask.tolist()
    out = [[0.0] * len(row) for row in rewards]
    for g in set(index):
        rows = [b for b in range(len(rewards)) if index[b] == g and sum(mask[b]) > 0]
        if not rows:
            continue
        bags = {b: [rewards[b][t] for t in range(len(mask[b])) if mask[b][t]] for b in rows}
        if length_weighting:
            k = len(rows)
            mu = sum(sum(bags[b]) / len(bags[b]) for b in rows) / k
            var = sum(sum((r - mu) ** 2 for r in bags[b]) / len(bags[b]) for b in rows) / k
        else:
            pooled = [r for b in rows for r in bags[b]]
            mu = sum(pooled) / len(pooled)
            var = sum((r - mu) ** 2 for r in pooled) / len(pooled)
        for b in rows:
            for t in range(len(mask[b])):
                if mask[b][t] and var > 0:
                    std = max(math.sqrt(var), std_floor)
                    out[b][t] = (rewards[b][t] - mu) / (std + eps) if norm_by_std else rewards[b][t] - mu
    return torch.tensor(out, dtype=torch.float64)


def reference_pure(local, step_end, solved, lengths, index, temperature=0.1, coef=1.0, scale=1.0):
    """Row by row, step by step, as PURE's process_experiences + rloo returns read (python floats)."""
    rows = []
    for i, length in enumerate(lengths):
        steps, current = [], []
        for t in range(length):
            current.append(t)
            if step_end[i][t] or t == length - 1:
                steps.append(current)
                current = []
        values = [max(-1.0, min(1.0, scale * sum(local[i][t] for t in s) / len(s))) for s in steps]
        z = [math.exp(-v / temperature) for v in values]
        rows.append({"steps": steps, "r": [zi / sum(z) * v for zi, v in zip(z, values, strict=True)]})
    advantages, returns = [], []
    for i, length in enumerate(lengths):
        others = [j for j in range(len(lengths)) if j != i and index[j] == index[i] and lengths[j] > 0]
        other_len = sum(lengths[j] for j in others)
        per_token = sum(sum(rows[j]["r"]) for j in others) / other_len if other_len else 0.0
        v = solved[i] - 1.0
        if others:
            v -= sum(solved[j] - 1.0 for j in others) / len(others)
        reward = [0.0] * len(local[i])
        ends = set()
        for s, r in zip(rows[i]["steps"], rows[i]["r"], strict=True):
            reward[s[-1]] += r - per_token * len(s)
            ends.add(s[-1])
        if length:
            reward[length - 1] += coef * v
        ret = [sum(reward[t:length]) if t < length else 0.0 for t in range(len(local[i]))]
        returns.append(ret)
        advantages.append([0.0 if t in ends else ret[t] for t in range(len(local[i]))])
    return advantages, returns


def reference_pass(process, mask, outcome, fmt, index, s: PassSettings):
    """Row by row, chunk by chunk, group by group, in python floats."""
    batch = len(process)
    densities, lengths = [], []
    for i in range(batch):
        pos = [t for t in range(len(process[i])) if mask[i][t]]
        runs = []
        for t in pos:
            v = process[i][t]
            cls = 0 if abs(v) < s.dead_zone else (v > 0) - (v < 0)
            if runs and runs[-1][0] == cls:
                runs[-1][1].append(t)
            else:
                runs.append((cls, [t]))
        chunks, pending = [], []
        for _, run in runs:
            if len(run) >= s.min_chunk:
                if chunks:
                    chunks.append(list(run))
                else:
                    chunks.append(pending + run)
            elif chunks:
                chunks[-1].extend(run)
            else:
                pending += run
        if not chunks and pending:
            chunks = [pending]
        d = [0.0] * len(process[i])
        for j, chunk in enumerate(chunks):
            c = sum(process[i][t] for t in chunk) / len(chunk)
            for t in chunk:
                if s.density == "chunk":
                    d[t] = c
                elif s.density == "sequence":
                    d[t] = sum(process[i][u] for u in pos) / len(pos)
                else:
                    rest = [u for later in chunks[j:] for u in later]
                    d[t] = sum(process[i][u] for u in rest) / len(rest)
        densities.append(d)
        lengths.append(len(pos))

    norm = s.op == "grpo"
    adv = [[0.0] * len(process[i]) for i in range(batch)]
    for g in set(index):
        rows = [i for i in range(batch) if index[i] == g]
        with_tokens = [i for i in rows if lengths[i]]

        def z(values, rows=rows):
            if len(rows) == 1:
                return {rows[0]: values[rows[0]]}
            mean = statistics.fmean(values[i] for i in rows)
            std = statistics.stdev([values[i] for i in rows])
            return {i: (values[i] - mean) / (std + s.epsilon) if norm else values[i] - mean for i in rows}

        z_out = z([outcome[i] if lengths[i] else 0.0 for i in range(batch)])
        z_fmt = z([fmt[i] if lengths[i] else 0.0 for i in range(batch)])
        k = len(with_tokens)
        valid = {i: [t for t in range(len(mask[i])) if mask[i][t]] for i in with_tokens}
        mu = sum(sum(densities[i][t] for t in valid[i]) / lengths[i] for i in with_tokens) / max(k, 1)
        var = sum(sum((densities[i][t] - mu) ** 2 for t in valid[i]) / lengths[i] for i in with_tokens) / max(k, 1)
        std = max(math.sqrt(var), s.std_floor) if var > 0 else math.inf  # a group without variance: 0
        for i in with_tokens:
            for t in range(len(mask[i])):
                if mask[i][t]:
                    p = (densities[i][t] - mu) / (std + s.epsilon) if norm else (densities[i][t] - mu) * (var > 0)
                    adv[i][t] = z_out[i] + s.format_coef * z_fmt[i] + s.process_coef * p
    return adv


def reference_vps(
    base, lengths, index, cuts, logp, solved, alpha, space="prob", normalize="group", floor=-20.0, std_floor=0.0
):
    """Row by row, segment by segment, in python floats (the module docstring's formulas as written)."""

    def value(b):
        return math.exp(b) if space == "prob" else max(b, floor)

    def end(s):
        if s is None:
            return None
        return s if space == "prob" else max(math.log(s) if s > 0 else -math.inf, floor)

    deltas = []
    for i in range(len(lengths)):
        v = [value(b) for b in logp[i]]
        last = end(solved[i])
        d = [v[k + 1] - v[k] for k in range(len(v) - 1)]
        if v:
            d.append((last if last is not None else v[-1]) - v[-1])
        deltas.append(d)
    if normalize == "group":
        normed = []
        for i in range(len(lengths)):
            pool = [x for j in range(len(lengths)) if index[j] == index[i] for x in deltas[j]]
            mean = sum(pool) / len(pool) if pool else 0.0
            std = math.sqrt(sum((x - mean) ** 2 for x in pool) / len(pool)) if pool else 0.0
            normed.append([(x - mean) / (max(std, std_floor) + 1e-6) for x in deltas[i]])
        deltas = normed
    width = len(base[0])
    out, progress = [], []
    for i, length in enumerate(lengths):
        row, prow = [], []
        for t in range(width):
            k = sum(1 for c in cuts[i] if c <= t) - 1
            p = deltas[i][k] if (t < length and k >= 0) else 0.0
            prow.append(p)
            row.append(base[i][t] + alpha * p if t < length else 0.0)
        out.append(row)
        progress.append(prow)
    return out, progress


def reference_weights(
    mean_lp: list[float], responses: list[tuple], index: list, valid: list[bool], w_max: float, occurrence: str
) -> list[float]:
    """Row by row in float64: pi_hat from the copies and/or the model, 1/(K pi_hat) clipped, divided by the group
    mean (1 without tokens). `responses`: each row's valid token ids."""

    def pi_hat(j: int, members: list[int]) -> float:
        copies = sum(responses[m] == responses[j] for m in members) if occurrence != "model" else 1
        if occurrence == "count":
            return copies / len(members)
        return copies * math.exp(mean_lp[j]) / sum(math.exp(mean_lp[m]) for m in members)

    def raw(j: int, members: list[int]) -> float:
        return min(1.0 / (len(members) * pi_hat(j, members)), w_max)

    out = []
    for i in range(len(mean_lp)):
        if not valid[i]:
            out.append(1.0)
            continue
        members = [j for j in range(len(mean_lp)) if index[j] == index[i] and valid[j]]
        out.append(raw(i, members) / (sum(raw(j, members) for j in members) / len(members)))
    return out


def reference_turn_bot(rewards, mask, turn_reward, uids, gamma, norm_by_std=True, eps=1e-6, floor=0.0):
    """Slow loops: returns over the following turns, a leave-one-out bag mean, BoT's pooled population std."""
    rewards, mask, turn_reward = (np.asarray(x, dtype=np.float64) for x in (rewards, mask, turn_reward))
    q = np.zeros_like(rewards)
    for i in range(len(rewards)):
        turns, k, previous = [], -1, 0
        for t in range(rewards.shape[1]):
            if mask[i, t] and not previous:
                k += 1
                turns.append([])
            if mask[i, t]:
                turns[k].append(t)
            previous = mask[i, t]
        values = [np.mean(turn_reward[i, ts]) for ts in turns]
        for k, ts in enumerate(turns):
            later = sum(gamma ** (j - k) * values[j] for j in range(k + 1, len(turns)))
            q[i, ts] = rewards[i, ts] + later
    out = np.zeros_like(rewards)
    for uid in set(uids):
        members = [i for i in range(len(uids)) if uids[i] == uid and mask[i].any()]
        if len(members) < 2:
            continue
        means = {i: q[i, mask[i] != 0].mean() for i in members}
        mu = np.mean(list(means.values()))
        var = np.mean([np.mean((q[i, mask[i] != 0] - mu) ** 2) for i in members])
        if var == 0:
            continue
        scale = 1.0 / (max(np.sqrt(var), floor) + eps) if norm_by_std else 1.0
        for i in members:
            baseline = np.mean([means[j] for j in members if j != i])
            out[i] = np.where(mask[i] != 0, (q[i] - baseline) * scale, 0.0)
    return out
