"""Stand-alone HTTP reward servers speaking the contract of REWARD_API.md (one sub-package per task)."""
