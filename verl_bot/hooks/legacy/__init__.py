"""Touch points of verl's legacy trainer only (`trainer.use_v1=false`: `RayPPOTrainer`, one `DataProto` an iteration).

The legacy trainer keeps the whole iteration in one `DataProto` on the driver (TaskRunner), computes the advantages
with the module function `ray_trainer.compute_advantage`, and its agent-loop workers pad and stack each output in
`AgentLoopWorker._postprocess`. What verl-bot adds to an iteration is the same as on v1 (`verl_bot.training`); this
folder reads and writes the legacy trainer's `DataProto` for it: `batch` (`ProtoBatch`), `agent_loop` (dense rows,
streams, fatal markers), `trainer` (where it hands over its batch), `update_actor` (a verl-bot loss's knobs).
"""
