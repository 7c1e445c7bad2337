"""The React reward scorer's edge: per item it gathers the facts (extract -> bundle + lint in persistent Node
workers -> render in a warm Chromium; the LLM judge beside them, the VLM judge on the screenshot), and
``reward_servers.react.verdict.react_verdict`` turns them into the verdict (docs/REWARD_API.md, docs/ALGORITHMS.md
"React rewards").

A reasoning model's think block (``verl_bot_contract.think``) is never searched for the component; a response
cut off inside it gets ``think_truncated_score`` (flag ``think_truncated``)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import time
from typing import Any

from reward_servers.common.judge import JudgeConfig
from reward_servers.common.service import ItemResult, ScoreItem, Scorer, add_common_args, serve
from verl_bot_contract.think import split_think

from .config import ReactConfig, add_args, from_args
from .extract import extract
from .judges import ReactJudges
from .verdict import Built, ReactFacts, Rendered, react_verdict
from .worker import NodeWorker, WorkerError, WorkerPool, node_ready

log = logging.getLogger(__name__)
VERSION = "0.1.0"


def judge_config(prefix: str, base_url: str, model: str, cfg: ReactConfig) -> JudgeConfig | None:
    """None when no base URL is configured (argument or ``{prefix}BASE_URL``)."""
    if not (base_url or os.environ.get(prefix + "BASE_URL")):
        return None
    return JudgeConfig.from_env(
        prefix, base_url=base_url or None, model=model or None, timeout_s=cfg.judge_timeout_s,
        max_retries=cfg.judge_max_retries, max_concurrency=cfg.judge_max_concurrency,
    )


class ReactScorer(Scorer):
    name = "react"
    version = VERSION
    error_score = -0.3  # G of an item the server could not score (internal error), documented

    def __init__(self, cfg: ReactConfig | None = None, llm: JudgeConfig | None = None, vlm: JudgeConfig | None = None,
                 *, judges_from_env: bool = True):
        self.cfg = cfg or ReactConfig()
        c = self.cfg
        if judges_from_env:
            llm = llm or (judge_config("REACT_LLM_JUDGE_", c.llm_judge_base_url, c.llm_judge_model, c)
                          if c.llm_judge else None)
            vlm = vlm or (judge_config("REACT_VLM_JUDGE_", c.vlm_judge_base_url, c.vlm_judge_model, c)
                          if c.vlm_judge else None)
        self.judges = ReactJudges(llm if c.llm_judge else None, vlm if c.vlm_judge else None, c.prompts_dir or None)
        self.compile_pool = WorkerPool(c.compile_workers, "compile", warm={"op": "warm", "lint": c.lint})
        self.render_worker = NodeWorker("render", env={"REACT_REWARD_RENDER_SLOTS": str(c.render_slots)},
                                        warm={"op": "warm", "lint": False, "render": c.render})
        # bound what is in flight inside the workers, so their time limits measure work, not queueing
        self._compile_sem = asyncio.Semaphore(4 * max(1, c.compile_workers))
        self._render_sem = asyncio.Semaphore(max(1, c.render_slots))
        self._judge_health: tuple[float, dict] = (0.0, {})
        self.counters = {"items": 0, "compiled": 0, "render_timeouts": 0}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        ok, why = node_ready()
        if not ok:
            raise RuntimeError(f"React reward server not set up: {why}")
        await self.judges.start()
        tasks = [self.compile_pool.broadcast({"op": "ping"}, 180)]  # starts (and warms) every worker
        if self.cfg.render:
            tasks.append(self.render_worker.call({"op": "ping"}, 180))
        await asyncio.gather(*tasks)

    async def stop(self) -> None:
        await asyncio.gather(self.compile_pool.close(), self.render_worker.close(), self.judges.close())

    async def health(self) -> dict:
        out: dict[str, Any] = {"ok": True}
        try:
            await self.compile_pool.broadcast({"op": "ping"}, 10)
            out["compile_workers"] = "up"
        except WorkerError as e:
            out.update(ok=False, compile_workers=f"down: {e}")
        if self.cfg.render:
            try:
                await self.render_worker.call({"op": "warm", "lint": False, "render": True}, 60)
                out["browser"] = "up"
            except WorkerError as e:
                out.update(ok=False, browser=f"down: {e}")
        else:
            out["browser"] = "disabled"
        now = time.monotonic()
        if now - self._judge_health[0] > 5.0:
            self._judge_health = (now, await self.judges.health())
        out["judges"] = self._judge_health[1]
        if "down" in out["judges"].values():
            out["ok"] = False
        out["restarts"] = {"compile": self.compile_pool.restarts, "render": self.render_worker.restarts}
        out["judge_stats"] = dict(self.judges.stats)
        out["counters"] = dict(self.counters)
        return out

    # -------------------------------------------------------------------- facts
    async def _compile(self, code: str, cfg: ReactConfig) -> Built:
        """The bundle and ESLint findings of ``code`` from a compile worker (a worker that died under it is retried
        on another; code that hangs a worker is not)."""
        if len(code) > cfg.max_code_chars:
            diag = {"line": None, "column": None, "message": f"code longer than {cfg.max_code_chars} characters"}
            return Built({"ok": False, "diagnostics": [diag]}, [], ("code_too_long",))
        flags: list[str] = []
        attempts = 1 + len(self.compile_pool.workers)  # each worker may have died under us once
        for attempt in range(attempts):
            try:
                async with self._compile_sem:
                    res = await self.compile_pool.call({"op": "compile", "code": code, "lint": cfg.lint},
                                                       cfg.compile_timeout_s)
                if cfg.lint and res.get("lint") is None:
                    flags.append("lint_failed")
                return Built(res["bundle"], res.get("lint") or [], tuple(flags))
            except WorkerError as e:
                err = str(e)
                if "did not answer" in err:  # the code itself hung a worker: do not retry
                    flags.append("compile_timeout")
                    break
                flags.append("compile_worker_restarted")
                if attempt == attempts - 1:
                    break
        diag = {"line": None, "column": None, "message": f"bundling/linting failed: {err}"}
        return Built({"ok": False, "diagnostics": [diag]}, [], tuple(flags))

    async def _render(self, bundle: dict, cfg: ReactConfig, screenshot: bool) -> Rendered:
        """The page of ``bundle`` rendered by the render worker (an infrastructure failure retried twice)."""
        flags: list[str] = []
        req = {"op": "render", "js": bundle["js"], "map": bundle.get("map"), "heavy": bundle.get("heavy", False),
               "timeout_ms": int(cfg.render_timeout_s * 1000), "settle_ms": cfg.settle_ms,
               "screenshot": screenshot, "format": cfg.screenshot_format}
        for attempt in range(3):
            try:
                async with self._render_sem:
                    r = await self.render_worker.call(req, cfg.render_timeout_s + 30)
            except WorkerError as e:
                flags.append("render_worker_restarted")
                r = {"ok": False, "infra": True, "timed_out": False, "runtime_errors": [f"render failed: {e}"]}
            if not r.get("infra") or attempt == 2:
                break
            flags.append("render_retried")
        if r.get("infra"):
            flags.append("render_infra_error")
        if r.get("timed_out"):
            flags.append("render_timeout")
            self.counters["render_timeouts"] += 1
        return Rendered(r, tuple(flags))

    async def gather(self, item: ScoreItem, cfg: ReactConfig) -> ReactFacts:
        """The facts of one response: the component after its think block and, for a component, its bundle and lint,
        its render, and the judges' answers; the LLM judge runs beside all the rest, the VLM judge on the screenshot
        of a component that compiled."""
        think = split_think(item.response, cfg.think_opened)
        ex = extract(item.response, think.end)
        use_vlm = cfg.vlm_judge and self.judges.vlm_client is not None
        if think.truncated or not ex.is_component:
            return ReactFacts(ex, think, use_vlm=use_vlm)
        use_llm = cfg.llm_judge and self.judges.llm_client is not None
        llm = asyncio.create_task(self.judges.llm(item.prompt, ex.code)) if use_llm else None
        try:
            built = await self._compile(ex.code, cfg)
            rendered = None
            if built.bundle.get("ok") and cfg.render:
                rendered = await self._render(built.bundle, cfg, screenshot=use_vlm or cfg.return_screenshot)
            shot = rendered.page.get("screenshot") if rendered and rendered.page.get("ok") else None
            vlm = None
            if use_vlm and shot:
                mime = "image/jpeg" if cfg.screenshot_format == "jpeg" else "image/png"
                vlm = await self.judges.vlm(item.prompt, base64.b64decode(shot), ex.code, cfg.vlm_local, mime)
            return ReactFacts(ex, think, built, rendered, await llm if llm else None, vlm, use_vlm)
        finally:
            if llm is not None:
                llm.cancel()  # a no-op once awaited; an exception above leaves no judge call behind

    # --------------------------------------------------------------------- score
    async def score(self, item: ScoreItem, options: dict) -> ItemResult:
        """The verdict of the component after the response's think block (``react_verdict``)."""
        cfg = self.cfg.with_options(options)
        self.counters["items"] += 1
        result = react_verdict(await self.gather(item, cfg), cfg)
        self.counters["compiled"] += int(result.info["compiled"])
        return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m reward_servers.react", description=__doc__)
    add_common_args(p, default_port=8801)
    add_args(p)
    args = p.parse_args(argv)
    serve(ReactScorer(from_args(args)), args)
