"""What verl-bot adds to a training iteration, written once for every trainer.

A trainer adapter (`verl_bot.hooks.v1`: v1's `PPOTrainer` on TransferQueue; `verl_bot.hooks.legacy`: the legacy
`RayPPOTrainer` and its subclasses on one `DataProto`) implements `batch.TrainingBatch` and says where verl hands
over its batch; everything else is here:

    batch.py         the batch interface, and the readers written over it (streams, token records, token values)
    advantage.py     the advantage call: batch context, dense-row and failure-rate stops, token records
    context.py       the estimator's batch context (failed rows, streams, fields) and the failure-rate stop
    failures.py      failed rollouts out of their groups (any estimator, verl's own included); multi-output samples
    rows.py          dense `rm_scores` rows and their checksums
    records.py       the token records of the iterations `algorithm.token_report_steps` asks for
    metrics.py       the reward metrics of the iteration
    panel.py         the token-credit panel and histograms for wandb and tensorboard
    actor_update.py  what a verl-bot method ships with the actor update and reads back from it
"""
