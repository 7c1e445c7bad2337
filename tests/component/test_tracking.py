"""The token-credit panel and the per-token histograms for verl's experiment trackers (issue 37).

Pure logic on the committed token records of a CPU demo run (tests/fixtures/token_report/): the knobs, the steps,
the rollouts, the panel as HTML (the offline report's view: its colours, its scales) and as Markdown (rendered by
TensorBoard's own Markdown), the histograms and S_t. Then the real trackers: the hook's senders write a wandb
offline run and TensorBoard event files, and the readers of tests/harness/trackers.py read them back equal to the
records. The readers are those of the end-to-end check (tests/e2e/test_e2e_resume.py: a run of verl's real trainer
with `trainer.logger=[console,file,wandb,tensorboard]`).
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.harness.trackers import (
    check_panel,
    html_panel,
    markdown_panel,
    offline_trackers,
    tensorboard_panels,
    wandb_panels,
)
from verl_bot.observe import panels
from verl_bot.observe.token_records import read_records
from verl_bot.observe.token_view import colour, shown_tokens
from verl_bot.training import panel
from verl_bot.training.batch import token_values

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "tests" / "fixtures" / "token_report" / "bot" / "token_records" / "step_20.jsonl"


@pytest.fixture(scope="module")
def records():
    return read_records(RECORDS)


def reference_scales(records: list[dict]) -> dict[str, float]:
    """The report's colour scale of each quantity, the slow way: the smallest round number (1, 1.5, 2, 2.5, 3, 4,
    5, 6 or 8 times a power of ten) at least the largest |value| of any token of `records`."""
    scales = {}
    for key in ("rewards", "advantages"):
        largest = max(abs(v) for record in records for v in record[key])
        rounds = sorted(m * 10.0**k for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8) for k in range(-6, 7))
        scales[key] = next(r for r in rounds if r >= largest * (1 - 1e-12))
    return scales


# ------------------------------------------------------------------------------------------- knobs
def test_the_knobs_defaults_and_refusals():
    assert panels.PanelSettings.from_config({}) == panels.PanelSettings(10, 4, 256)
    assert panels.PanelSettings.from_config({"token_panel_every": 0, "token_panel_tokens": 0}).every == 0
    for knob, value in (("token_panel_every", -1), ("token_panel_rollouts", 0), ("token_panel_tokens", 2.5),
                        ("token_panel_every", "often"), ("token_panel_rollouts", True)):
        with pytest.raises(ValueError, match=f"algorithm.{knob}"):
            panels.PanelSettings.from_config({knob: value})


def test_the_logged_steps_are_the_first_every_nth_and_the_last():
    assert [s for s in range(1, 26) if panels.logged_step(s, 25, 10)] == [1, 10, 20, 25]
    assert [s for s in range(1, 5) if panels.logged_step(s, 4, 2)] == [1, 2, 4]
    assert not any(panels.logged_step(s, 25, 0) for s in range(1, 26))


def test_a_panel_takes_whole_groups_in_prompt_order_then_cuts():
    uids = ["b", "a", "b", "c", "a", "b"]
    prompts = ["zeta", "alpha", "zeta", "beta", "alpha", "zeta"]
    assert panels.chosen_rows(uids, prompts, 3) == [1, 4, 3]  # group a (alpha) whole, then c (beta)
    assert panels.chosen_rows(uids, prompts, 100) == [1, 4, 3, 0, 2, 5]
    assert shown_tokens(10, 4) == [0, 1, 8, 9] and shown_tokens(10, 5) == [0, 1, 2, 8, 9]
    assert shown_tokens(3, 4) == [0, 1, 2] and shown_tokens(3, 0) == [0, 1, 2]


# ------------------------------------------------------------------------------------------- panels
def test_the_html_panel_is_the_reports_view_of_the_records(records):
    page = panels.panel_html(20, "bot", records[:6], 10)
    rollouts, scales = html_panel(page)
    assert scales == pytest.approx(reference_scales(records[:6]))  # the report's rule, over the rollouts shown
    check_panel(rollouts, records[:6], 10)
    assert [r["key"] for r in rollouts] == [r["key"] for r in records[:6]]
    for token in (t for r in rollouts for t in r["tokens"]):
        for quantity, scale in scales.items():
            assert token[quantity + "_bg"] == "rgb({},{},{})".format(*colour(token[quantity], scale))
    assert "Token credit at step 20 (bot)" in page and page.count('<div class="prompt">') == 2  # two groups
    assert all(r["omitted"] == [14] for r in rollouts)  # 24 tokens, 10 shown


def test_the_markdown_panel_holds_the_shown_tokens_and_tensorboard_renders_it(records):
    from tensorboard import plugin_util

    text = panels.panel_markdown(20, "bot", records[:6], 10)
    rollouts = markdown_panel(text)
    check_panel(rollouts, records[:6], 10)
    scales = reference_scales(records[:6])
    for token in (t for r in rollouts for t in r["tokens"]):
        assert token["squares"] == (panels.squares(token["rewards"], scales["rewards"]),
                                    panels.squares(token["advantages"], scales["advantages"]))
    rendered = plugin_util.markdown_to_safe_html(text)
    assert rendered.count("<table>") == 6 and rendered.count("<tr>") == 6 * (1 + 10 + 1)
    # a token's text as the report shows it, whatever Markdown would read in it
    tricky = {**records[0], "token_bytes": [b.hex() for b in (b"a|b", b"*x_", b"<i>", b"\\`#")], "special": [False] * 4,
              "response_ids": [1, 2, 3, 4], "rewards": [0.0] * 4, "advantages": [0.0] * 4}
    cells = re.findall(r"<tr>\n<td>\d</td>\n<td>(.*?)</td>", plugin_util.markdown_to_safe_html(
        panels.panel_markdown(1, "bot", [tricky], 0)))
    assert [html.unescape(c) for c in cells] == ["a|b", "*x_", "<i>", "\\`#"]


def test_squares_are_the_reports_colour_scale_in_quarters():
    assert panels.squares(1.0, 1.0) == "\U0001f7e6" * 4 and panels.squares(-5.0, 2.0) == "\U0001f7e5" * 4
    assert panels.squares(0.5, 1.0) == "\U0001f7e6" * 2 and panels.squares(-0.3, 1.0) == "\U0001f7e5"
    assert panels.squares(0.1, 1.0) == "" and panels.squares(0.0, 1.0) == ""


# --------------------------------------------------------------------------------------- histograms
def test_histograms_count_every_finite_value():
    values = np.array([0.0, 1.0, 1.0, 2.0, np.nan, np.inf, -1.0])
    h = panels.histogram(values, bins=3)
    assert h.counts.tolist() == [1, 1, 3] and h.edges.tolist() == [-1.0, 0.0, 1.0, 2.0]
    assert (h.num, h.total, h.total_squares, h.low, h.high) == (5, 3.0, 7.0, -1.0, 2.0)
    assert panels.histogram(np.array([np.nan])) is None
    assert panels.histogram(np.zeros(7)).counts.sum() == 7  # one value: numpy's unit range around it


def test_s_t_undoes_the_managers_composition():
    rng = np.random.default_rng(0)
    scores, lengths = np.array([0.5, -1.0, 3.0]), np.array([4, 1, 6])
    local = [rng.uniform(-1, 1, n) for n in lengths]
    rewards = np.concatenate([1.0 * g + 0.5 * s for g, s in zip(scores, local, strict=True)])  # w_g G + w_s S_t
    got = panels.local_signal(rewards.astype(np.float32), scores, lengths, 1.0, 0.5)
    np.testing.assert_allclose(got, np.concatenate(local), atol=1e-6)


class ListBatch:
    """A `verl_bot.training.batch.TrainingBatch` over rows written in the test (each trainer's own is checked
    against the interface in tests/component/test_transfer_queue_hooks.py)."""

    def __init__(self, fields: dict[str, list[torch.Tensor]], infos: list[dict], padding: list[bool]):
        self.fields, self.infos, self.pad = fields, infos, padding

    def rows(self):
        return [{"reward_extra_info": info, "uid": str(i)} for i, info in enumerate(self.infos)]

    def padding(self):
        return torch.tensor(self.pad)

    def ragged(self, names, rows=None):
        rows = range(len(self.infos)) if rows is None else rows
        return {name: [self.fields[name][i] for i in rows] for name in names}


def test_s_t_undoes_the_returns_layout():
    """r = 0.5 * S, plus 1.0 * G on each rollout's last token: [-0.5, 0, 0.5+2] | [0.25+(-1)] -> S back."""
    rewards = np.array([-0.5, 0.0, 2.5, -0.75])
    got = panels.local_signal_returns(rewards, np.array([2.0, -1.0]), np.array([3, 1]), 1.0, 0.5)
    np.testing.assert_allclose(got, [-1.0, 0.0, 1.0, 0.5])


def test_the_steps_token_values_leave_out_padding_rows_and_masked_tokens():
    rewards = [torch.tensor([1.0, 1.5, 1.0]), torch.tensor([2.0, 2.0]), torch.tensor([9.0, 9.0, 9.0, 9.0])]
    advantages = [torch.tensor([0.1, 0.2, 0.3]), torch.tensor([-0.5, -0.5]), torch.tensor([7.0] * 4)]
    masks = [torch.tensor([1, 1, 0]), torch.tensor([1, 1]), torch.tensor([1, 1, 1, 1])]
    batch = ListBatch({"rm_scores": rewards, "advantages": advantages, "response_mask": masks},
                      [{"score": 1.0}, {"score": 2.0}, {}], [False, False, True])
    values = token_values(batch, lambda r, g, n: panels.local_signal(r, g, n, 1.0, 0.5))
    assert values["rewards"].tolist() == [1.0, 1.5, 2.0, 2.0]  # row 0's masked token and row 2 left out
    assert values["advantages"].tolist() == pytest.approx([0.1, 0.2, -0.5, -0.5])
    assert values["local"].tolist() == [0.0, 1.0, 0.0, 0.0]  # (r - 1.0 * G) / 0.5
    assert "local" not in token_values(batch)


# ----------------------------------------------------------------------------------- real trackers
def test_the_senders_write_real_tracker_files_read_back_equal(records, tmp_path, monkeypatch):
    """wandb (offline) and TensorBoard, through verl's own `Tracking` (its wandb module, its SummaryWriter)."""
    with offline_trackers(tmp_path, monkeypatch, ["wandb", "tensorboard"]) as trackers:
        values = {"rewards": np.array([r for rec in records for r in rec["rewards"]]),
                  "advantages": np.array([a for rec in records for a in rec["advantages"]])}
        histograms = panels.step_histograms(values)
        shown = panel.showing_trackers(trackers)
        assert sorted(shown) == ["tensorboard", "wandb"]
        panel.send_wandb(shown["wandb"], 20, panels.panel_html(20, "bot", records[:6], 10), histograms)
        panel.send_tensorboard(shown["tensorboard"].writer, 20,
                                       panels.panel_markdown(20, "bot", records[:6], 10), histograms)
        trackers.log({"reward/score/mean": 0.5}, step=20)  # verl's scalars of the same step
    shown_panels = wandb_panels(tmp_path)
    assert list(shown_panels) == [20]
    check_panel(html_panel(shown_panels[20]["html"])[0], records, 10)
    counts, bins = shown_panels[20]["histograms"]["verl_bot/A_t"]
    assert sum(counts) == len(values["advantages"]) and bins[0] == pytest.approx(values["advantages"].min())
    assert set(shown_panels[20]["histograms"]) == {"verl_bot/r_t", "verl_bot/A_t"}
    texts, tb_histograms, scalars = tensorboard_panels(tmp_path / "tb")
    check_panel(markdown_panel(texts[20]), records, 10)
    a_t = tb_histograms["verl_bot/A_t"][20]
    assert a_t.num == len(values["advantages"]) and a_t.sum == pytest.approx(values["advantages"].sum())
    assert list(a_t.bucket) == histograms["verl_bot/A_t"].counts.tolist()
    assert scalars == {"reward/score/mean"}
