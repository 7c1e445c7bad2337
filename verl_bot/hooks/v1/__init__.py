"""Touch points of verl's v1 trainer only (`trainer.use_v1=true`: `verl.trainer.ppo.v1`, TransferQueue)."""
