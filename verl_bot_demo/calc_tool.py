"""The `toy_calc` task's calculator as a verl function tool (`actor_rollout_ref.rollout.multi_turn.function_tool_path`).

verl's tool registry loads this file by path in every agent-loop worker (verl/tools/tool_registry.py) and infers the
tool's OpenAI schema from the signature and the docstring's `Args:` block (verl/tools/function_tool.py).
"""

from verl.tools.function_tool import function_tool

from verl_bot_demo.calc import evaluate


@function_tool
def calc(expression: str) -> str:
    """Evaluate an integer arithmetic chain of + and - from left to right.

    Args:
        expression: digits joined by + and -, e.g. "3+4-2".
    """
    return evaluate(expression)
