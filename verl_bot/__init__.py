"""verl-bot: BoT-GRPO and token-level rewards for verl (loaded through the `verl.plugins` entry point)."""

__version__ = "0.1.0"
