"""The recipes: the paper's experiments and the CPU runs, composed and run in Python (`recipes/*.sh` call
`python -m verl_bot.recipes NAME`; docs/recipes.md explains them).

    tables.py      the paper's tasks (reward server, judges, sizes) and recipes (a task on a model family)
    algos.py       what each ALGO sets: verl's keys and the method knobs, their defaults from the knobs' declarations
    settings.py    a paper recipe's run: every setting from the environment, the platform, SMOKE=1's sizes
    compose.py     verl's command line of a paper recipe
    checks.py      the pre-launch checks, each one line
    prepare.py     what is made when missing: data, the CPU platform's tiny models, the LongRoPE copy, the ckpt link
    services.py    the reward server, judges and PRM a recipe starts (vllm serve), each until it answers
    supervise.py   the processes a recipe starts and what a stop (Ctrl-C, SIGTERM) does to them
    launch.py      a paper recipe from start to end: checks, DRY_RUN, node plan, services, trainer, SMOKE=1's verdict
    cpu_train.py   one CPU run of verl's trainer on a CPU task
    demo.py        the CPU demo: bot against grpo, then the report
"""
