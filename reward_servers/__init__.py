"""Stand-alone HTTP reward servers speaking the contract of docs/REWARD_API.md (one sub-package per task)."""
