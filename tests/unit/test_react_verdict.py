"""The React verdict as a pure function (`reward_servers.react.verdict.react_verdict`) on hand-written facts: each
expected verdict computed by hand (docs/ALGORITHMS.md "React rewards": ESLint weights fatal -0.5, error -0.1,
warning -0.02; judges' worst lines -0.3, -0.2, -0.1; a compiler line -1; phi(d) = 1 - d/4 with window 3, so
phi = 1, 0.75, 0.5, 0.25 at d = 0..3). The facts gathered over HTTP: tests/component/test_react_server.py."""

import pytest

from reward_servers.react.config import ReactConfig
from reward_servers.react.extract import Extraction, extract
from reward_servers.react.verdict import Built, ReactFacts, Rendered, react_verdict
from verl_bot_contract.think import ThinkSplit

RESPONSE = "```jsx\nexport default function App() {\n  const x = 1;\n  return <h1>Hi</h1>;\n}\n```"
CODE = "export default function App() {\n  const x = 1;\n  return <h1>Hi</h1>;\n}"
APP = Extraction(CODE, 7, 77, True, "fence", "jsx", 1)
LINES = [(7, 39), (39, 54), (54, 76), (76, 77)]  # the code's four lines in the response, each with its newline
NO_THINK = ThinkSplit(0, "none")
BUNDLED = {"ok": True, "js": "(()=>{})()", "diagnostics": []}
PAGE = {"ok": True, "runtime_errors": [], "runtime_error_lines": [], "screenshot": "iVBO", "elements": 3}
UNUSED_X = {"line": 2, "column": 9, "rule": "no-unused-vars", "severity": "warning", "message": "'x' is unused"}


def spans(*values):
    """The spans of line values S(1..4), in the order of LINES."""
    return [{"start": a, "end": b, "value": pytest.approx(v)} for (a, b), v in zip(LINES, values, strict=True)]


def test_the_hand_written_extraction_is_the_responses():
    assert extract(RESPONSE) == APP and RESPONSE[7:77] == CODE
    assert [RESPONSE[a:b] for a, b in LINES] == [line + "\n" for line in CODE.split("\n")[:3]] + ["}"]


def test_a_component_that_compiles_with_a_lint_warning_and_both_judges():
    llm = {"status": "ok", "score": 8.0, "worst_lines": [3]}
    vlm = {"status": "ok", "score": 6.0, "lines": [1], "attribution": "ok"}
    facts = ReactFacts(APP, NO_THINK, Built(BUNDLED, [UNUSED_X]), Rendered(PAGE), llm, vlm, use_vlm=True)
    result = react_verdict(facts, ReactConfig())
    assert result.parts == {"compile": 0.0, "eslint": -0.02, "llm_judge": 0.8, "vlm_judge": 0.6}
    assert result.score == pytest.approx(1.38)
    # penalties: line 1 -0.3 (VLM), line 2 -0.02 (ESLint), line 3 -0.3 (LLM); S(m) = sum of p_l * phi(|m - l|)
    assert result.local == spans(-0.3 - 0.02 * 0.75 - 0.3 * 0.5, -0.3 * 0.75 - 0.02 - 0.3 * 0.75,
                                 -0.3 * 0.5 - 0.02 * 0.75 - 0.3, -0.3 * 0.25 - 0.02 * 0.5 - 0.3 * 0.75)
    assert result.flags == []
    info = result.info
    assert (info["bundled"], info["rendered"], info["compiled"]) == (True, True, True)
    assert info["lint"] == [UNUSED_X] and info["render"]["elements"] == 3 and "screenshot" not in info
    assert info["judge"] == {"llm": {"score": 8.0, "worst_lines": [3], "status": "ok"},
                             "vlm": {"score": 6.0, "status": "ok", "lines": [1], "attribution": "ok"}}
    assert (info["code_start"], info["code_end"], info["extraction"]["source"]) == (7, 77, "fence")


def test_a_syntax_error_costs_the_compile_penalty_on_its_line_and_the_vlm_judge_its_sentinel():
    broken = {"ok": False, "diagnostics": [{"line": 3, "column": 3, "message": "Unexpected token"}]}
    fatal = {"line": 3, "column": 3, "rule": "parse-error", "severity": "fatal", "message": "Parsing error"}
    down = {"status": "unavailable", "score": None, "worst_lines": []}
    facts = ReactFacts(APP, NO_THINK, Built(broken, [fatal]), None, down, None, use_vlm=True)
    result = react_verdict(facts, ReactConfig())
    assert result.parts == {"compile": -1.0, "eslint": -0.5, "vlm_judge": -0.3, "llm_judge": 0.0}
    assert result.score == pytest.approx(-1.8)
    # line 3: -1 (the diagnostic) - 0.5 (the fatal finding)
    assert result.local == spans(-1.5 * 0.5, -1.5 * 0.75, -1.5, -1.5 * 0.75)
    assert result.flags == ["judge_unavailable", "compile_failed"]
    assert result.info["judge"]["vlm"] == {"score": None, "status": "no_screenshot"} and not result.info["compiled"]


def test_a_runtime_error_is_a_compile_failure_on_the_line_its_stack_points_at():
    page = {"ok": False, "runtime_errors": ["TypeError: x is not a function"], "runtime_error_lines": [2],
            "timed_out": False, "screenshot": None}
    facts = ReactFacts(APP, NO_THINK, Built(BUNDLED, []), Rendered(page, ("render_retried",)))
    result = react_verdict(facts, ReactConfig(lint=False))
    assert (result.score, result.parts) == (-1.0, {"compile": -1.0, "eslint": 0.0})
    assert result.local == spans(-0.75, -1.0, -0.75, -0.5)
    assert result.flags == ["render_retried", "compile_failed"]
    assert result.info["runtime_errors"] == page["runtime_errors"] and result.info["runtime_error_lines"] == [2]
    assert (result.info["bundled"], result.info["rendered"]) == (True, False)


def test_without_rendering_a_bundled_component_has_compiled():
    result = react_verdict(ReactFacts(APP, NO_THINK, Built(BUNDLED, [])), ReactConfig(render=False))
    assert (result.score, result.local, result.flags) == (0.0, [], ["render_disabled"])
    assert result.info["compiled"] is True and "render" not in result.info


def test_judges_that_answer_without_a_score_or_lines():
    llm = {"status": "unparseable", "score": None, "worst_lines": [2]}
    vlm = {"status": "ok", "score": 10.0, "lines": [], "attribution": "unparseable"}
    facts = ReactFacts(APP, NO_THINK, Built(BUNDLED, []), Rendered(PAGE), llm, vlm, use_vlm=True)
    result = react_verdict(facts, ReactConfig(return_screenshot=True))
    assert result.parts == {"compile": 0.0, "eslint": 0.0, "llm_judge": 0.0, "vlm_judge": 1.0}
    assert result.local == []  # an unparseable reply's lines are not used; the VLM judge named none
    assert result.flags == ["judge_unparseable", "judge_unparseable"]  # the LLM score, the VLM attribution
    assert result.info["screenshot"] == "iVBO"


def test_a_response_with_no_component_gets_the_sentinel():
    nothing = Extraction(reason="no code found")
    result = react_verdict(ReactFacts(nothing, NO_THINK, use_vlm=True), ReactConfig())
    assert (result.score, result.parts, result.local) == (-0.3, {"not_component": -0.3}, [])
    assert result.flags == ["not_a_component"] and result.info["extraction"]["reason"] == "no code found"


def test_a_response_cut_off_in_its_think_block_scores_as_low_as_a_broken_component():
    cut = ThinkSplit(18, "truncated")  # "<think>a component": 18 characters, all think block
    facts = ReactFacts(Extraction(start=18, end=18, reason="empty response"), cut, use_vlm=True)
    result = react_verdict(facts, ReactConfig(think_local=0.05))
    assert result.parts == {"think_truncated": -1.5, "vlm_judge": -0.3} and result.score == pytest.approx(-1.8)
    assert result.local == [{"start": 0, "end": 18, "value": 0.05}]  # think_local on the block
    assert result.flags == ["think_truncated"]
    assert result.info["extraction"]["reason"] == "cut off inside the think block"
