"""A resumed verl-bot run keeps the metrics of its earlier steps (verl_bot/hooks/resume.py), through verl 0.9.1's
own `Tracking` and `FileLogger` (which open the metrics file with mode "wb"); a stock run is left as verl makes it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_bot.hooks import resume
from verl_bot.hooks.wrap import PATCHED_ATTR

BOT = {"algorithm": {"adv_estimator": "bot"}, "reward": {"reward_manager": {"name": "bot"}}}
STOCK = {"algorithm": {"adv_estimator": "grpo"}, "reward": {"reward_manager": {"name": "naive"}}}


def _lines(*steps: int) -> bytes:
    return b"".join(json.dumps({"step": s, "data": {"x": float(s)}}).encode() + b"\n" for s in steps)


@pytest.fixture
def killed_run(tmp_path, monkeypatch):
    """A metrics file as a run killed during step 6 left it: steps 1-5 and a line cut short; fresh hook state."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_lines(1, 2, 3, 4, 5) + b'{"step": 6, "da')
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    monkeypatch.setattr(resume, "_resumed_at", [])
    return path


def _start(config: dict, global_steps: int) -> None:
    """The wrapped `fit` of a trainer at `global_steps` (what verl's checkpoint load left), then verl's logger."""
    import verl.trainer.ppo.v1.trainer_base  # noqa: F401 - its import installs the hooks, as in verl's trainer
    from verl.utils.tracking import FileLogger, Tracking

    assert getattr(FileLogger.__init__, PATCHED_ATTR, False)
    trainer = SimpleNamespace(config=OmegaConf.create(config), global_steps=global_steps)
    resume._make_fit(lambda self, agent_loop_manager: None)(trainer, None)
    tracking = Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    tracking.log(data={"x": 7.0}, step=global_steps + 1)


def test_a_resumed_verl_bot_run_keeps_the_steps_up_to_its_checkpoint(killed_run):
    _start(BOT, global_steps=4)  # the step-4 checkpoint: step 5 is trained again, step 6's line was cut short
    assert [json.loads(ln)["step"] for ln in killed_run.read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert killed_run.read_bytes().startswith(_lines(1, 2, 3, 4))


@pytest.mark.parametrize(("config", "global_steps"), [(BOT, 0), (STOCK, 4)])
def test_a_fresh_run_and_a_stock_run_start_a_fresh_file_as_verl_does(killed_run, config, global_steps):
    _start(config, global_steps)
    assert [json.loads(ln)["step"] for ln in killed_run.read_text().splitlines()] == [global_steps + 1]


def test_the_path_is_verls_own(tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    file_logger = FileLogger("proj", "exp")
    file_logger.finish()
    assert resume.file_logger_path("proj", "exp") == file_logger.filepath
    assert resume.lines_through(str(tmp_path / "none.jsonl"), 3) == b""


def test_the_legacy_trainer_keeps_the_steps_up_to_the_checkpoint_it_resumes_from(killed_run, tmp_path):
    """verl's legacy `fit` opens its `FileLogger` before it loads the checkpoint: the trainer's construction
    (`RayPPOTrainer.__init__`'s hook) reads the step first, as verl's `_load_checkpoint` will (its tracker file
    `latest_checkpointed_iteration.txt`)."""
    from verl.utils.tracking import Tracking

    from verl_bot.hooks.legacy.trainer import _make_init

    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_4").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    trainer_config = {"resume_mode": "auto", "default_local_dir": str(ckpt), "resume_from_path": None}
    trainer = SimpleNamespace(config=OmegaConf.create({**BOT, "trainer": trainer_config}), global_steps=0)

    def legacy_init(self, config):
        self.config = config

    _make_init(legacy_init)(trainer, trainer.config)
    # verl's `fit`: the logger first, then the checkpoint, then step 5
    Tracking(project_name="p", experiment_name="e", default_backend=["file"]).log(data={"x": 7.0}, step=5)
    assert [json.loads(ln)["step"] for ln in killed_run.read_text().splitlines()] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(("mode", "path", "step"), [("auto", None, 4), ("disable", None, 0),
                                                     ("resume_path", "/x/global_step_2", 2)])
def test_the_legacy_resume_step_is_the_one_verls_load_checkpoint_reads(tmp_path, mode, path, step):
    (tmp_path / "global_step_4").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    config = OmegaConf.create({"trainer": {"resume_mode": mode, "default_local_dir": str(tmp_path),
                                           "resume_from_path": path}})
    assert resume.legacy_resume_step(config) == step
    config.trainer.default_local_dir = str(tmp_path / "empty")
    assert resume.legacy_resume_step(config) == (2 if mode == "resume_path" else 0)
