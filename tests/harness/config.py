"""verl's composed `ppo_trainer` config as the start-up checks read it, with local parquet files of the data sources
a test names (their scorers are checked at start-up)."""

import pandas as pd

from tests.conftest import compose_verl_config

BOT = ("algorithm.adv_estimator=bot", "reward.reward_manager.name=bot")


def config(tmp_path, *overrides, data_sources=("toy_lint",)):
    """verl's composed ppo_trainer config with local train/val parquet files holding `data_sources`."""
    path = tmp_path / "train.parquet"
    prompts = [[{"role": "user", "content": "x"}]] * len(data_sources)
    pd.DataFrame({"data_source": list(data_sources), "prompt": prompts}).to_parquet(path)
    return compose_verl_config([f"data.train_files={path}", f"data.val_files={path}", *overrides])
