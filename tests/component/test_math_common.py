"""Tests of reward_servers/common: the service factory over real HTTP, the judge client against the fake judge."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import requests

from reward_servers.common.fake_judge import FakeJudge, Rule
from reward_servers.common.judge import (
    JudgeBadResponse,
    JudgeClient,
    JudgeConfig,
    JudgeUnavailable,
    user_message,
)
from reward_servers.common.service import ItemResult, Scorer, ServerThread, combine_spans, create_app
from verl_bot_contract.verdict import Span


class EchoScorer(Scorer):
    """Scores len(response); 'boom' raises; 'sleep' hangs; 'nan' answers a NaN G; overlapping local spans."""

    name = "echo"
    version = "t"
    error_score = -9.0

    async def score(self, item, options):
        if item.response == "boom":
            raise RuntimeError("exploded")
        if item.response == "sleep":
            await asyncio.sleep(30)
        if item.response == "nan":
            return ItemResult(score=float("nan"), parts={"len": 3.0})
        n = float(len(item.response))
        return ItemResult(
            score=n,
            parts={"len": n},
            local=[Span(start=0, end=3, value=0.5), Span(start=2, end=100000, value=0.25)],
            info={"scale": options.get("scale", 1)},
        )


@pytest.fixture(scope="module")
def echo_server():
    app = create_app(EchoScorer(), token="s3cret", max_request_bytes=4096, item_timeout_s=1.0, max_items=50)
    with ServerThread(app) as srv:
        yield srv


AUTH = {"Authorization": "Bearer s3cret"}


def post(srv, body, headers=AUTH, raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(body).encode()
    return requests.post(srv.url + "/score", data=data, headers={**headers, "Content-Type": "application/json"})


def test_health(echo_server):
    r = requests.get(echo_server.url + "/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["name"] == "echo"


def test_order_ids_and_isolation(echo_server):
    items = [
        {"id": "a", "response": "hello"},
        {"id": "b", "response": "boom"},
        "not an object",
        {"id": 7, "response": None},
        {"id": "c", "response": "hi!!", "prompt": [{"role": "user", "content": "x"}]},
        {"id": "d", "response": "sleep"},
        {"id": "e", "response": "nan"},
    ]
    t0 = time.monotonic()
    r = post(echo_server, {"items": items, "options": {"scale": 2}})
    assert r.status_code == 200
    out = r.json()["items"]
    assert [o["id"] for o in out] == ["a", "b", None, 7, "c", "d", "e"]
    assert out[0]["global"] == {"score": 5.0, "parts": {"len": 5.0}} and out[0]["error"] is None
    assert out[0]["info"] == {"scale": 2}
    # overlapping spans summed, clamped to len("hello") = 5
    assert out[0]["local"] == [
        {"start": 0, "end": 2, "value": 0.5},
        {"start": 2, "end": 3, "value": 0.75},
        {"start": 3, "end": 5, "value": 0.25},
    ]
    assert out[1]["global"]["score"] == -9.0 and "exploded" in out[1]["error"]
    assert out[2]["error"].startswith("bad item") and "bad_item" in out[2]["flags"]
    assert "response" in out[3]["error"]
    assert out[4]["global"]["score"] == 4.0
    assert out[5]["error"] == "timeout" and "timeout" in out[5]["flags"]
    # the server checks its answer against the contract's validator: a NaN G is the item's error, not a NaN sent
    assert out[6]["global"]["score"] == -9.0 and "global.score is not finite" in out[6]["error"]
    assert time.monotonic() - t0 < 10


def test_auth_and_limits(echo_server):
    assert post(echo_server, {"items": []}, headers={}).status_code == 401
    assert post(echo_server, {"items": []}, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert post(echo_server, {"items": []}).json() == {"items": []}
    big = {"items": [{"response": "x" * 5000}]}
    assert post(echo_server, big).status_code == 413
    # chunked upload without Content-Length is counted while streaming
    body = json.dumps(big).encode()
    r = requests.post(
        echo_server.url + "/score", data=iter([body[:2000], body[2000:]]), headers={**AUTH, "Content-Type": "x"}
    )
    assert r.status_code == 413
    assert post(echo_server, {"items": [{"response": ""}] * 51}).status_code == 413
    assert post(echo_server, None, raw=b"{not json").status_code == 400
    assert post(echo_server, {"items": "x"}).status_code == 400
    assert post(echo_server, [1, 2]).status_code == 400


def test_invalid_utf8(echo_server):
    # raw invalid bytes inside a JSON string, and a lone surrogate escape: each cleaned to one U+FFFD per bad unit
    raw = (
        b'{"items": [{"id": 1, "response": "ab\xff\xfecd"}, {"id": 2, "response": "x\\udc80y"},'
        b' {"id": 3, "response": "ok"}]}'
    )
    r = post(echo_server, None, raw=raw)
    assert r.status_code == 200
    out = r.json()["items"]
    assert out[0]["global"]["score"] == 6.0 and "invalid_utf8" in out[0]["flags"]
    assert out[1]["global"]["score"] == 3.0 and "invalid_utf8" in out[1]["flags"]
    assert out[2]["flags"] == []


def test_combine_spans():
    def spans(*triples):
        return [Span(start=a, end=b, value=v) for a, b, v in triples]

    assert combine_spans([]) == []
    assert combine_spans(spans((5, 5, 1.0), (3, 1, 1.0), (0, 4, 0.0))) == []
    got = combine_spans(spans((0, 10, 1.0), (5, 15, -1.0), (10, 12, 1.0)))
    # precise check: [0,5)=1, [5,10)=0 dropped, [10,12)=0 dropped, [12,15)=-1
    assert got == spans((0, 5, 1.0), (12, 15, -1.0))
    merged = combine_spans(spans((0, 2, 0.5), (2, 4, 0.5)), length=3)
    assert merged == spans((0, 3, 0.5))


# ------------------------------------------------------------------------------------------------------ judge


def run(coro):
    return asyncio.run(coro)


def chat_once(client: JudgeClient, text: str) -> str:
    """One chat call in a fresh event loop, closing the client's session afterwards."""

    async def go():
        async with client:
            return await client.chat([{"role": "user", "content": text}])

    return run(go())


def test_judge_reply_rules_image_and_model_discovery():
    with FakeJudge([Rule(r"capital of France", "Paris"), Rule("", "dunno")], model="m1", api_key="k") as fj:
        cfg = JudgeConfig(base_url=fj.base_url, api_key="k")

        async def go():
            async with JudgeClient(cfg) as j:
                a = await j.chat([{"role": "user", "content": "What is the capital of France?"}])
                b = await j.chat([user_message("describe", b"\x89PNG fake")])
                return a, b, await j.model()

        a, b, model = run(go())
        assert (a, b, model) == ("Paris", "dunno", "m1")
        part = fj.requests[1]["messages"][0]["content"][1]
        assert part["type"] == "image_url" and part["image_url"]["url"].startswith("data:image/png;base64,")
        assert fj.requests[0]["model"] == "m1" and fj.requests[0]["temperature"] == 0.0
        # wrong key -> 401 -> bad response, no retries
        bad = JudgeClient(cfg.replace(api_key="wrong", max_retries=3))
        with pytest.raises(JudgeBadResponse):
            chat_once(bad, "x")
        assert bad.requests_sent == 2  # GET /models (open) + one POST, no retry on 401


def test_judge_retries_then_succeeds():
    with FakeJudge([Rule(status=500, times=2), Rule(reply="fine")], model="m") as fj:
        j = JudgeClient(JudgeConfig(base_url=fj.base_url, model="m", max_retries=2, backoff_s=0.01))
        assert chat_once(j, "q") == "fine"
        assert fj.count == 3


def test_judge_unavailable_and_garbage():
    with FakeJudge([Rule(pattern="slow", delay_s=2.0, reply="late"), Rule(raw_body="<html>oops")], model="m") as fj:
        cfg = JudgeConfig(base_url=fj.base_url, model="m", timeout_s=0.3, max_retries=1, backoff_s=0.01)
        t0 = time.monotonic()
        with pytest.raises(JudgeUnavailable):
            chat_once(JudgeClient(cfg), "slow")
        assert time.monotonic() - t0 < 1.8
        with pytest.raises(JudgeBadResponse):
            chat_once(JudgeClient(cfg), "fast")
    # nothing listening at all
    with pytest.raises(JudgeUnavailable):
        chat_once(JudgeClient(cfg.replace(max_retries=0)), "x")


def test_judge_concurrency_limit():
    with FakeJudge([Rule(delay_s=0.1, reply="ok")], model="m") as fj:
        j = JudgeClient(JudgeConfig(base_url=fj.base_url, model="m", max_concurrency=3))

        async def go():
            async with j:
                return await asyncio.gather(*(j.chat([{"role": "user", "content": str(i)}]) for i in range(12)))

        assert run(go()) == ["ok"] * 12
        assert fj.max_in_flight == 3


def test_judge_config_from_env(monkeypatch):
    monkeypatch.setenv("XJ_BASE_URL", "http://h:1/v1")
    monkeypatch.setenv("XJ_TIMEOUT_S", "2.5")
    monkeypatch.setenv("XJ_MAX_RETRIES", "0")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    cfg = JudgeConfig.from_env("XJ_", model="m", timeout_s=None)
    got = (cfg.base_url, cfg.timeout_s, cfg.max_retries, cfg.api_key, cfg.model)
    assert got == ("http://h:1/v1", 2.5, 0, "sk-env", "m")
    assert JudgeConfig.from_env("XJ_", base_url="http://o/v1").base_url == "http://o/v1"  # explicit wins


class SickScorer(EchoScorer):
    async def health(self):
        return {"ok": False, "why": "no browser"}


def test_health_503_when_scorer_cannot_score():
    with ServerThread(create_app(SickScorer())) as srv:
        r = requests.get(srv.url + "/health")
        assert r.status_code == 503 and r.json()["status"] == "unavailable" and r.json()["why"] == "no browser"
        # no token configured: /score is open
        out = requests.post(srv.url + "/score", json={"items": [{"response": "ab"}]}).json()["items"][0]
        assert out["global"]["score"] == 2.0
