"""A run before Ray starts: does it use verl-bot, can it work, and on which GPUs.

    activation.py     does a run use verl-bot (from its config; every hook passes other runs through)
    preflight.py      the start-up checks: what cannot work is refused in one line before any model loads
    trainer_modes.py  verl's trainer modes and features with verl-bot (DAPO's filter, the legacy trainers)
    entry_points.py   verl's entry points (task runners), the trainer path of each, what the CPU refuses
    verl_schema.py    verl's configuration schema and entry modules, read from the installed verl
    verl_surface.py   every verl setting and entry module classified per verl-bot method (docs/verl_settings.md)
    families.py       the three model families (chat format, EOS, LongRoPE)
    node_plan.py      a GPU recipe's node plan and what it refuses before anything starts (verl_bot/recipes/)
    reach.py          every node reaches every reward server and judge
    smoke.py          the verdict block of a recipe's SMOKE=1 run (light command)
"""
