"""The CPU demo's tasks and tiny models, apart from the plugin: what `make demo`, the CPU recipes and the tests train.

    tiny_model.py, tiny_prm.py, pretrain.py   tiny local models of the three families (no hub), their warm starts
    toy_math.py, toy_calc.py, toy_turns.py,   the CPU tasks (toy_lint's data is recipes/data/toy_lint.py)
    toy_react.py, calc.py, calc_tool.py
    scorers.py                                their built-in scorers (`builtin:toy_lint`, ... of the `bot` manager,
                                              loaded when a run names one)
    console.py                                the demo's quiet console

The plugin (`verl_bot`) imports nothing of it; the `bot` manager names its scorers by module path. docs/cpu_demo.md.
"""
