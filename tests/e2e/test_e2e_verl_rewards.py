"""A verl user's setup switched to BoT-GRPO, through verl 0.9.1's real trainer on the CPU backend.

GSM8K in the layout of verl's own preprocessing (`examples/data_preprocess/gsm8k.py`: data_source "openai/gsm8k",
chat `prompt`, `reward_model.ground_truth`), scored by verl's `default_compute_score`; the verl command gets nothing
but `algorithm.adv_estimator=bot reward.reward_manager.name=bot`.

Two probes, loaded by verl through `VERL_USE_EXTERNAL_MODULES` (tests/harness/trainer.py): one wraps the `bot`
manager's `run_single` in the reward-loop worker and records each response's ids, its decoded text (as verl's
own managers decode it), the ground truth and what the manager returned; the other records the
`token_level_rewards` the `bot` estimator receives. One run, 2 steps.

A `reward.custom_reward_function` whose dict carries a local span takes the same way through the trainer (dense
rewards into the estimator: tests/e2e/test_e2e_resume.py); that verl's reward loop hands the manager the user's
function, with its `reward_kwargs`, and that its G, parts and span come out as token rewards:
tests/component/test_verl_scorer.py, through verl's own `RewardLoopWorker`.

    .venv/bin/python -m pytest -q tests/e2e/test_e2e_verl_rewards.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.harness.trainer import PROBE, Run

pytestmark = pytest.mark.timeout(900)

BOT = ["algorithm.adv_estimator=bot", "reward.reward_manager.name=bot"]  # all a verl user adds
GSM8K_COMMAND = ["data.max_prompt_length=160"]  # verl's GSM8K prompts are longer than test_cpu_e2e's default

MANAGER_PROBE = '''
import json, os
from verl_bot.rewards import manager as _manager

_run_single = _manager.BoTRewardManager.run_single

async def _recorded_run_single(self, data):
    """Runs the real `bot` manager, then records the response as verl's own managers see it."""
    out = await _run_single(self, data)
    item = data[-1]
    ids = item.batch["responses"]
    n = int(item.batch["attention_mask"][-ids.shape[-1]:].sum())
    valid = ids[:n].tolist()
    record = {
        "data_source": str(item.non_tensor_batch["data_source"]),
        "ground_truth": item.non_tensor_batch["reward_model"]["ground_truth"],
        "ids": valid,
        "text": self.tokenizer.decode(valid, skip_special_tokens=True),
        "reward_score": out["reward_score"],
        "extra": out["reward_extra_info"],
    }
    with open(os.environ["VB_MANAGER_PROBE_FILE"], "a") as f:
        f.write(json.dumps(record) + "\\n")
    return out

_manager.BoTRewardManager.run_single = _recorded_run_single
'''

QUESTIONS = [  # half of the answers are 7: the model below answers "#### 7" to anything
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "7"),
    ("A box holds 12 pens. How many pens are in 5 boxes?", "60"),
    ("There are 14 birds and 7 fly away. How many birds stay?", "7"),
    ("A shirt costs $20 and is 25% off. What is the new price?", "15"),
    ("Ben had 25 cards and gave away 18. How many are left?", "7"),
    ("There are 4 rows of 9 chairs. How many chairs in all?", "36"),
    ("Mia saves $8 a week for 7 weeks, then spends $49. How much is left?", "7"),
    ("A train goes 60 miles an hour for 3 hours. How far does it go?", "180"),
]
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'  # verl's gsm8k.py


def answering_model(tiny_model_dir: Path, out: Path, answer: str = "#### 7") -> Path:
    """The tiny model fine-tuned (80 Adam steps, seeded) to answer `answer` in verl's GSM8K format, so that
    verl's gsm8k scorer gives 1 on the rows whose ground truth is 7 and 0 on the others (a random model
    never writes `#### <number>`, and every G would be 0)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(tiny_model_dir, out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    answer_ids = tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    examples = []
    for question, _ in QUESTIONS[:2]:
        chat = [{"role": "user", "content": question + " " + INSTRUCTION}]
        prompt_ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt_ids, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + answer_ids])
        labels = ids.clone()
        labels[0, : len(prompt_ids)] = -100  # learn the answer only
        examples.append((ids, labels))
    for _ in range(80):
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in examples)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    return out


def gsm8k_rows() -> list[dict]:
    """Rows as verl's examples/data_preprocess/gsm8k.py writes them."""
    rows = []
    for i, (question, answer) in enumerate(QUESTIONS * 2):
        rows.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": "train", "index": i, "answer": f"... #### {answer}", "question": question},
            }
        )
    return rows


def workdir_for(root: Path, model_dir: Path, rows: list[dict]) -> Path:
    """What `Run` expects: model, train/val parquet, the probe module."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model").symlink_to(model_dir, target_is_directory=True)
    frame = pd.DataFrame(rows)
    frame.to_parquet(root / "train.parquet")
    frame.iloc[:8].to_parquet(root / "val.parquet")
    (root / "probe").mkdir()
    (root / "probe" / "vb_probe.py").write_text(PROBE + MANAGER_PROBE)
    return root


def train(workdir: Path, name: str, extra: list[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """2 steps of verl's trainer; returns (manager records, estimator calls, per-step metrics)."""
    run = Run(workdir, name, extra)
    manager_file = run.dir / "manager.jsonl"
    run.env["VB_MANAGER_PROBE_FILE"] = str(manager_file)
    records = run.finish(timeout=480).records(manager_file)
    calls = [c for c in run.records() if c.get("estimator") == "bot"]  # the probe also records the advantage step
    metrics = run.records(run.metrics)
    steps = [m["data"] for m in sorted(metrics, key=lambda m: m["step"]) if "actor/pg_loss" in m["data"]]
    assert len(calls) == 2 and len(steps) == 2, (calls, metrics)
    return records, calls, steps


def assert_rewards_reached_the_estimator(records: list[dict], calls: list[dict]) -> None:
    """The estimator got the manager's token rewards: the same rows (length, sum of the token rewards)."""
    sent = sorted((len(r["reward_score"]), sum(r["reward_score"])) for r in records)
    received = sorted((row["length"], row["sum"]) for call in calls for row in call["rows"])
    assert [n for n, _ in sent] == [n for n, _ in received], (sent, received)
    np.testing.assert_allclose([t for _, t in sent], [t for _, t in received], atol=1e-4)


def test_gsm8k_of_verls_preprocessing_with_only_the_two_overrides(tmp_path, tiny_model_dir):
    """G of every response is verl's gsm8k compute_score of its decoded text; no local signal."""
    from verl.utils.reward_score import gsm8k

    model = answering_model(tiny_model_dir, tmp_path / "answering_model")
    workdir = workdir_for(tmp_path / "gsm8k", model, gsm8k_rows())
    records, calls, steps = train(workdir, "gsm8k", [*GSM8K_COMMAND, *BOT])
    assert len(records) == 32  # 2 steps x 4 prompts x 4 rollouts
    scores = []
    for r in records:
        assert r["data_source"] == "openai/gsm8k"
        g = float(gsm8k.compute_score(r["text"], r["ground_truth"]))
        assert r["extra"]["score"] == r["extra"]["acc"] == g, r  # acc: verl's validation reads it
        assert r["extra"]["scorer_failed"] == 0.0, r
        assert r["reward_score"] == [g] * len(r["ids"]), r  # G on every token
        scores.append(g)
    assert 0.0 in scores and 1.0 in scores, [(r["text"], r["ground_truth"]) for r in records]
    assert_rewards_reached_the_estimator(records, calls)
    assert [data["reward/score/mean"] for data in steps] == pytest.approx([np.mean(scores[:16]), np.mean(scores[16:])])
    assert all(data["reward/scorer_failed/mean"] == 0.0 for data in steps)
