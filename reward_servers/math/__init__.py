"""Math (AIME) reward server: math-verify answer check, step/format parsing, step judge (docs/REWARD_API.md)."""

__version__ = "0.1.0"
