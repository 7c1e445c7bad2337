"""Touch points of verl's legacy trainer only (`trainer.use_v1=false`: `RayPPOTrainer`, one `DataProto` a step).

The legacy trainer keeps the whole step in one `DataProto` on the driver (TaskRunner) and computes the
advantages with the module function `ray_trainer.compute_advantage`; its agent-loop workers pad each output and
stack them in `AgentLoopWorker._postprocess`. What verl-bot adds to a step is the same as on v1
(`verl_bot.training`); this folder reads and writes the legacy trainer's `DataProto` for it.

    agent_loop          AgentLoopWorker._agent_loop_postprocess, AgentLoopWorker._postprocess
                        dense rm_scores rows and bot_stream_<name> fields; a fatal marker stops the run;
                        reward_extra_info kept as one per-row dict column
    trainer             RayPPOTrainer.fit, ray_trainer.compute_advantage, ray_trainer.compute_data_metrics
                        the step's batch context, failed rollouts out of their groups, the failure-rate stop,
                        token records, reward metrics
    update_actor        RayPPOTrainer._update_actor      a verl-bot loss's knobs to the actor update
"""
