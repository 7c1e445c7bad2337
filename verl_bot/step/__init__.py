"""What verl-bot adds to a training step, the same on both of verl's trainer paths.

The trainer adapters (`verl_bot.hooks.v1`: the v1 `PPOTrainer` on TransferQueue; `verl_bot.hooks.legacy`: the
legacy `RayPPOTrainer` on one `DataProto`) read the batch in their trainer's way and hand it here as plain rows
and tensors:

    context.py   the estimator's batch context of a step (failed rows, streams, fields) and the failure-rate stop
    failures.py  failed rollouts out of their groups (any estimator, verl's own included); multi-output sessions
    records.py   the token records of the steps `algorithm.token_report_steps` asks for
"""
