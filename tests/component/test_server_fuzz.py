"""Both reward servers answer every request body, however malformed, with a 4xx or a verdict per item, never a 5xx
(the `bot` manager retries a 5xx as a transient fault), and keep serving: a property-based fuzz over real HTTP on
loopback (hypothesis), against the real math server (math-verify in its worker pool, the rule step judge) and the real
React server (a Node compile worker: esbuild and ESLint; rendering off, no judge).

A body is arbitrarily nested JSON, an object with wrong types at every field of the request, its items and its options,
huge numbers, NaN and Infinity literals, invalid UTF-8, bytes that are not JSON, or nothing. The status a body must get
is the contract's (docs/REWARD_API.md), written here as its own rule (`expected_status`); after each body a
well-formed request still gets its verdict.
"""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from reward_servers.common.service import DEFAULT_MAX_ITEMS, MAX_JSON_DEPTH, ServerThread, create_app
from reward_servers.math.config import MathConfig
from reward_servers.math.server import MathScorer
from reward_servers.react.config import PER_CALL, ReactConfig
from reward_servers.react.server import ReactScorer
from verl_bot_contract.verdict import validate_verdict

COMPONENT = "```tsx\nexport default function App() { return <h1>Hi</h1>; }\n```"
MATH_OPTIONS = ("answer_type", "strategy", "window", "judge", "think_opened", "think_local", "think_truncated_penalty",
                "untagged_steps")
FUZZ = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def math_server():
    cfg = MathConfig(workers=1, judge_enabled=True, judge_kind="rule", item_timeout_s=4.0, verify_timeout_s=2)
    with ServerThread(create_app(MathScorer(cfg), item_timeout_s=10.0)) as srv:
        yield srv


@pytest.fixture(scope="module")
def react_server():
    scorer = ReactScorer(ReactConfig(compile_workers=1, render=False), judges_from_env=False)
    with ServerThread(create_app(scorer, item_timeout_s=30.0), startup_timeout_s=120) as srv:
        yield srv


# ------------------------------------------------------------------------------------------------- bodies
def depth(value) -> int:
    """Nesting depth of a parsed JSON value (a scalar 0), by a plain walk."""
    if isinstance(value, dict):
        value = list(value.values())
    return 1 + max(map(depth, value), default=0) if isinstance(value, list) else 0


def expected_status(raw: bytes) -> int:
    """REWARD_API's status of /score for a body: 400 when it is not a JSON object with an `items` list (or nests
    deeper than the servers take) or its `options` are not an object, 413 over `max_items` items, else 200."""
    try:
        body = json.loads(raw.decode("utf-8", errors="surrogateescape"))
        too_deep = depth(body) > MAX_JSON_DEPTH
    except (ValueError, RecursionError):
        return 400
    if too_deep or not isinstance(body, dict) or not isinstance(body.get("items"), list):
        return 400
    if len(body["items"]) > DEFAULT_MAX_ITEMS:
        return 413
    return 200 if isinstance(body.get("options") or {}, dict) else 400


SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-(10**4000), 10**4000) | st.floats()
           | st.text(st.characters(exclude_categories=()), max_size=20))  # floats: NaN, inf; text: lone surrogates
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                           max_size=4), max_leaves=12)
RESPONSES = st.sampled_from(["\\boxed{33}", "<step 1>3*11 = 33</step 1><final>33</final>", COMPONENT,
                             "<think>x</think>" + COMPONENT, ""])


def item(fields: dict) -> st.SearchStrategy:
    """An item whose every field is absent, of its type or of any other."""
    return st.fixed_dictionaries({}, optional={name: typed | JSON for name, typed in fields.items()})


ITEM = item({"id": st.text(max_size=5), "prompt": st.just("Compute 3 * 11."), "response": RESPONSES,
             "ground_truth": st.sampled_from([33, "33", "\\frac{1}{2}"]),
             "extra_info": st.just({"answer_type": "aime"})})


def body(option_names: tuple[str, ...]) -> st.SearchStrategy:
    options = st.fixed_dictionaries({}, optional={name: JSON for name in option_names})
    return st.fixed_dictionaries({}, optional={"items": st.lists(ITEM | JSON, max_size=4) | JSON,
                                               "options": options | JSON})


def dumped(value) -> bytes:
    """JSON with NaN and Infinity literals, as Python writes it."""
    return json.dumps(value).encode()


def raw_bodies(option_names: tuple[str, ...]) -> st.SearchStrategy:
    structured = body(option_names)
    return st.one_of(
        structured.map(dumped),
        JSON.map(dumped),
        structured.map(dumped).map(lambda b: b.replace(b'"', b'"\xff\xfe', 1)),  # invalid UTF-8 inside a string
        st.integers(1, 100_000).map(lambda n: b'{"items": [{"response": ' + b"[" * n + b"]" * n + b"}]}"),
        st.integers(1, 6000).map(lambda k: b'{"items": [{"response": "x", "id": ' + b"9" * k + b"}]}"),
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
    )


def post(srv, raw: bytes) -> requests.Response:
    return requests.post(srv.url + "/score", data=raw, headers={"Content-Type": "application/json"}, timeout=60)


def check(srv, raw: bytes, well_formed: dict) -> dict:
    """The body's status is the contract's, a 200 holds one verdict per item, and the server still answers
    `well_formed`: its verdict is returned."""
    reply = post(srv, raw)
    event(f"HTTP {reply.status_code}")  # the share of each status: --hypothesis-show-statistics
    assert reply.status_code == expected_status(raw), (raw[:300], reply.status_code, reply.text[:300])
    if reply.status_code == 200:
        items = reply.json()["items"]
        assert len(items) == len(json.loads(raw.decode("utf-8", errors="surrogateescape"))["items"])
        for verdict in items:
            validate_verdict(verdict)
    else:
        assert "error" in reply.json()
    after = post(srv, dumped({"items": [well_formed]}))
    assert after.status_code == 200, after.text[:300]
    (verdict,) = after.json()["items"]
    assert verdict["error"] is None and verdict["id"] == well_formed["id"], verdict
    return verdict


EDGES = [b"", b"NaN", b"[]", b"{}", b'{"items": {}}', b'{"items": [], "options": 3}',
         b'{"items": [{"response": "x", "ground_truth": NaN, "id": Infinity}], "options": {"window": -Infinity}}',
         b'{"items": [{"response": "\xff\xfe ok"}]}', b"\xff\xfe\xfd", b"[" * 100_000 + b"]" * 100_000,
         b'{"items": [' + b"[" * 5000 + b"]" * 5000 + b"]}", b'{"items": [{"id": 1e999999, "response": "x"}]}',
         b'{"items": [{"response": "x"}]' + b"9" * 5000 + b"}"]


def with_edges(test):
    for edge in EDGES:
        test = example(edge)(test)
    return test


@FUZZ
@given(raw=raw_bodies(MATH_OPTIONS))
@with_edges
def test_the_math_server_never_answers_5xx_and_keeps_serving(math_server, raw):
    well_formed = {"id": "ok", "prompt": "Compute 3 * 11.", "response": "\\boxed{33}", "ground_truth": 33}
    verdict = check(math_server, raw, well_formed)
    assert verdict["info"]["correct"] is True and verdict["global"]["parts"]["answer"] == 3.0


@FUZZ
@given(raw=raw_bodies(tuple(sorted(PER_CALL))))
@with_edges
def test_the_react_server_never_answers_5xx_and_keeps_serving(react_server, raw):
    verdict = check(react_server, raw, {"id": "ok", "prompt": "A heading", "response": COMPONENT})
    assert verdict["info"]["compiled"] is True and verdict["global"]["parts"]["compile"] == 0.0
