"""React reward server: extraction, score arithmetic, judge-reply parsing, config (no Node, no browser)."""

from __future__ import annotations

import pytest

from reward_servers.react import scoring
from reward_servers.react.config import ReactConfig, from_env, impacts
from reward_servers.react.extract import extract, line_starts, looks_like_component, numbered
from reward_servers.react.judges import fences, fill, parse_lines, parse_score, prompt_text

COMP = "export default function App() {\n  return <div>hi</div>;\n}"


# ------------------------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize("lang", ["jsx", "tsx", "js", "ts", "javascript", "typescript", ""])
def test_fenced_languages(lang):
    resp = f"Intro text.\n```{lang}\n{COMP}\n```\nOutro."
    ex = extract(resp)
    assert ex.is_component and ex.source == "fence"
    assert resp[ex.start : ex.end] == COMP == ex.code


def test_fence_info_string_and_tilde():
    resp = f"~~~tsx title=App.tsx\n{COMP}\n~~~"
    ex = extract(resp)
    assert ex.lang == "tsx" and ex.code == COMP


def test_other_languages_ignored_and_longest_component_wins():
    small = "const Spacer = () => <div/>;"
    resp = f"```bash\nnpm i\n```\n```jsx\n{small}\n```\n```jsx\n{COMP}\n```\n```css\nbody{{}}\n```"
    ex = extract(resp)
    assert ex.code == COMP and ex.blocks == 2 and ex.notes


def test_unclosed_fence_runs_to_end():
    resp = f"```jsx\n{COMP}\n"
    ex = extract(resp)
    assert ex.is_component and ex.code.startswith("export default") and ex.end <= len(resp)


def test_raw_component():
    resp = "Here it is\n\nimport React from 'react';\n" + COMP + "\n\n"
    ex = extract(resp)
    assert ex.source == "raw" and ex.is_component
    assert resp[ex.start : ex.end].startswith("import React") and resp[ex.start : ex.end].endswith("}")


@pytest.mark.parametrize(
    "resp",
    ["", "   \n", "Just prose, no code at all.", "```python\nprint(1)\n```", "```js\nconsole.log(1 + 2);\n```",
     "```jsx\nconst x = <div/>;\n```"],
)
def test_not_a_component(resp):
    assert not extract(resp).is_component


def test_looks_like_component_variants():
    assert looks_like_component("class Clock extends React.Component { render() { return <b/> } }")
    assert looks_like_component("const Card = ({a}) => React.createElement('div', null, a);")
    assert not looks_like_component("function helper() { return 1 }")


def test_huge_response_is_fast():
    import time

    resp = ("lorem ipsum " * 90_000) + f"\n```jsx\n{COMP}\n```"
    t = time.monotonic()
    ex = extract(resp)
    assert ex.is_component and time.monotonic() - t < 2.0


def test_line_helpers():
    assert line_starts("a\nbc\n") == [0, 2, 5]
    assert numbered("x\ny").splitlines() == ["1 | x", "2 | y"]


# ------------------------------------------------------------------------------------------------ scoring
def test_phi_window():
    assert [scoring.phi(d, 3) for d in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]


def test_spread_adds_up_and_clips_to_code():
    pen = scoring.new_penalties()
    scoring.add_compiler_penalties(pen, [{"line": 2}, {"line": 2, "column": 9}])  # one flagged line: -1 once
    scoring.add_lint_penalties(pen, [{"line": 2, "severity": "warning"}, {"line": 5, "severity": "error"}])
    assert pen[2] == pytest.approx(-1.02) and pen[5] == pytest.approx(-0.1)
    vals = scoring.spread(pen, n_lines=6, window=3)
    assert vals[2] == pytest.approx(-1.02 + 0.25 * -0.1)
    assert vals[1] == pytest.approx(-1.02 * 0.75)
    assert vals[6] == pytest.approx(-1.02 * 0.0 + -0.1 * 0.75)
    assert set(vals) <= set(range(1, 7))


def test_compiler_normalize_and_ranked_lines():
    pen = scoring.new_penalties()
    scoring.add_compiler_penalties(pen, [{"line": 1}, {"line": 3}], normalize=True)
    assert pen[1] == pen[3] == -0.5
    pen = scoring.new_penalties()
    scoring.add_ranked_lines(pen, [7, 2, 9])
    assert (pen[7], pen[2], pen[9]) == (-0.3, -0.2, -0.1)


def test_eslint_global_weights():
    f = [{"severity": "fatal"}, {"severity": "error"}, {"severity": "error"}, {"severity": "warning"}]
    assert scoring.eslint_global(f) == pytest.approx(-0.72)


def test_line_spans_map_to_response():
    resp = "Text\n```jsx\nline1\nline2\nline3\n```\n"
    ex = extract(resp.replace("line1", "export default function A(){ return <a/> }"))
    resp = resp.replace("line1", "export default function A(){ return <a/> }")
    spans = scoring.line_spans(ex.code, ex.start, ex.end, {1: -1.0, 2: -0.5, 3: -0.25})
    assert [resp[s["start"] : s["end"]] for s in spans] == [
        "export default function A(){ return <a/> }\n", "line2\n", "line3"]
    assert all(a["end"] <= b["start"] for a, b in zip(spans, spans[1:], strict=False))


# ------------------------------------------------------------------------------------------------ judge parsing
@pytest.mark.parametrize(
    "text,score",
    [('{"score": 7, "worst_lines": [1,2,3]}', 7.0), ("Score: 8/10", 8.0), ("**Score**: 6", 6.0), ("9", 9.0),
     ("I'd give it 4/10.", 4.0), ('```json\n{"score": 12}\n```', 10.0), ('{"score": -3}', 0.0),
     ("no idea", None), ("", None), ('{"score": "NaN"}', None)],
)
def test_parse_score(text, score):
    assert parse_score(text) == score


def test_parse_lines():
    assert parse_lines('{"score": 5, "worst_lines": [14, 22, 3]}', ("worst_lines",), 30) == [14, 22, 3]
    assert parse_lines('{"worst_lines": [99, 2, 2, 0, 5, 6]}', ("worst_lines",), 10) == [2, 5, 6]
    assert parse_lines("Lines: 4, 7 and 9", ("lines",), 10) == [4, 7, 9]
    assert parse_lines("nothing here", ("lines",), 10) is None


def test_fill_is_single_pass_and_fences_unique():
    code = "const s = '{prompt} {fence_close}';"
    fo, fc = fences(code)
    out = fill("{prompt}|{fence_open}\n{numbered_code}\n{fence_close}", prompt="TASK", numbered_code=code,
               fence_open=fo, fence_close=fc)
    assert out.count("TASK") == 1 and "{prompt} {fence_close}" in out and fc not in code


def test_prompt_text_from_chat_list():
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Build a todo app"}]
    assert prompt_text(chat) == "Build a todo app"


# ------------------------------------------------------------------------------------------------ config
def test_config_options_env_and_impacts():
    c = ReactConfig().with_options({"render": False, "compile_failure_penalty": "-2", "compile_workers": 9})
    assert c.render is False and c.compile_failure_penalty == -2.0 and c.compile_workers == 2  # not per call
    assert from_env({"REACT_REWARD_RENDER_TIMEOUT_S": "7.5", "REACT_REWARD_LINT": "false"}).render_timeout_s == 7.5
    assert from_env({"REACT_REWARD_LINT": "false"}).lint is False
    assert impacts("-0.3,-0.2,-0.1") == (-0.3, -0.2, -0.1)
