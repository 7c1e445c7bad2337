"""The React reward scorer: extract -> bundle + lint (persistent Node workers) -> render (warm Chromium) ->
LLM / VLM judges -> global parts and local line spans (docs/REWARD_API.md, docs/ALGORITHMS.md "React rewards").

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
from verl_bot_contract.think import split_think, think_spans

from . import scoring
from .config import ReactConfig, add_args, from_args, impacts
from .extract import Extraction, extract
from .judges import ReactJudges
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

    # -------------------------------------------------------------------- stages
    async def _compile(self, code: str, cfg: ReactConfig) -> tuple[dict, list, list[str]]:
        """(bundle result, lint findings, flags)."""
        if len(code) > cfg.max_code_chars:
            diag = {"line": None, "column": None, "message": f"code longer than {cfg.max_code_chars} characters"}
            return {"ok": False, "diagnostics": [diag]}, [], ["code_too_long"]
        flags: list[str] = []
        attempts = 1 + len(self.compile_pool.workers)  # each worker may have died under us once
        for attempt in range(attempts):
            try:
                async with self._compile_sem:
                    res = await self.compile_pool.call({"op": "compile", "code": code, "lint": cfg.lint},
                                                       cfg.compile_timeout_s)
                lint = res.get("lint") or []
                if cfg.lint and res.get("lint") is None:
                    flags.append("lint_failed")
                return res["bundle"], lint, flags
            except WorkerError as e:
                err = str(e)
                if "did not answer" in err:  # the code itself hung a worker: do not retry
                    flags.append("compile_timeout")
                    break
                flags.append("compile_worker_restarted")
                if attempt == attempts - 1:
                    break
        diag = {"line": None, "column": None, "message": f"bundling/linting failed: {err}"}
        return {"ok": False, "diagnostics": [diag]}, [], flags

    async def _render(self, bundle: dict, cfg: ReactConfig, screenshot: bool) -> tuple[dict, list[str]]:
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
        return r, flags

    # --------------------------------------------------------------------- score
    async def score(self, item: ScoreItem, options: dict) -> ItemResult:
        """Score the component after the response's think block; the think block gets ``think_local``."""
        cfg = self.cfg.with_options(options)
        self.counters["items"] += 1
        think = split_think(item.response, cfg.think_opened)
        ex = extract(item.response, think.end)
        info: dict[str, Any] = {
            "code_start": ex.start, "code_end": ex.end, "compiled": False, "rendered": False, "bundled": False,
            "diagnostics": [], "lint": [], "runtime_errors": [], "judge": {}, "think": think.info(),
            "extraction": {"source": ex.source, "lang": ex.lang, "blocks": ex.blocks, "notes": ex.notes},
        }
        if think.truncated:
            result = truncated_result(cfg, info, cfg.vlm_judge and self.judges.vlm_client is not None)
        else:
            result = await self._score_component(item, cfg, ex, info)
        result.local += think_spans(think, cfg.think_local)
        return result

    async def _score_component(self, item: ScoreItem, cfg: ReactConfig, ex: Extraction, info: dict) -> ItemResult:
        """The verdict of the extracted component ``ex`` (``info``: the item's info so far, completed here)."""
        if not ex.is_component:
            info["extraction"]["reason"] = ex.reason
            s = cfg.not_component_score
            return ItemResult(score=s, parts={"not_component": s}, info=info, flags=["not_a_component"])

        code = ex.code
        n_lines = code.count("\n") + 1
        flags: list[str] = []
        use_llm = cfg.llm_judge and self.judges.llm_client is not None
        use_vlm = cfg.vlm_judge and self.judges.vlm_client is not None
        llm_task = asyncio.create_task(self.judges.llm(item.prompt, code)) if use_llm else None
        try:
            bundle, lint, f = await self._compile(code, cfg)
            flags += f
            info["bundled"] = bool(bundle.get("ok"))
            info["diagnostics"] = bundle.get("diagnostics", [])
            info["lint"] = [{k: x.get(k) for k in ("line", "column", "rule", "severity", "message")} for x in lint]

            render: dict | None = None
            if bundle.get("ok") and cfg.render:
                render, f = await self._render(bundle, cfg, screenshot=use_vlm or cfg.return_screenshot)
                flags += f
                info["rendered"] = bool(render.get("ok"))
                info["runtime_errors"] = render.get("runtime_errors", [])
                info["runtime_error_lines"] = render.get("runtime_error_lines", [])
                info["render"] = {k: render.get(k) for k in ("blocked_requests", "blocked_urls", "elements",
                                                              "text_chars", "ms", "timed_out")}
                if cfg.return_screenshot and render.get("screenshot"):
                    info["screenshot"] = render["screenshot"]
            elif bundle.get("ok"):
                flags.append("render_disabled")
            compiled = bool(bundle.get("ok")) and (not cfg.render or bool(render and render.get("ok")))
            info["compiled"] = compiled
            if compiled:
                self.counters["compiled"] += 1

            parts: dict[str, float] = {
                "compile": 0.0 if compiled else cfg.compile_failure_penalty,
                "eslint": scoring.eslint_global(lint, cfg.eslint_weights) if cfg.lint else 0.0,
            }
            pen = scoring.new_penalties()
            # compiler lines: bundling diagnostics, and for a render failure the component line of each runtime
            # error's innermost stack frame (mapped through the bundle's source map)
            flagged = info["diagnostics"] + [{"line": ln} for ln in info.get("runtime_error_lines", [])]
            scoring.add_compiler_penalties(pen, flagged, cfg.compiler_line_penalty, cfg.compiler_line_normalize)
            if cfg.lint:
                scoring.add_lint_penalties(pen, lint, cfg.eslint_weights)

            vlm_task = None
            if use_vlm:
                shot = render.get("screenshot") if (compiled and render) else None
                if shot:
                    mime = "image/jpeg" if cfg.screenshot_format == "jpeg" else "image/png"
                    vlm_task = asyncio.create_task(
                        self.judges.vlm(item.prompt, base64.b64decode(shot), code, cfg.vlm_local, mime))
                else:
                    parts["vlm_judge"] = cfg.vlm_failure_score
                    info["judge"]["vlm"] = {"score": None, "status": "no_screenshot"}

            if llm_task is not None:
                j = await llm_task
                llm_task = None
                info["judge"]["llm"] = {"score": j["score"], "worst_lines": j["worst_lines"], "status": j["status"]}
                if j["status"] == "ok":
                    parts["llm_judge"] = j["score"] / 10.0
                    scoring.add_ranked_lines(pen, j["worst_lines"], impacts(cfg.llm_line_impacts))
                else:
                    parts["llm_judge"] = 0.0
                    flags.append("judge_unavailable" if j["status"] == "unavailable" else "judge_unparseable")
            if vlm_task is not None:
                v = await vlm_task
                info["judge"]["vlm"] = {"score": v["score"], "status": v["status"], "lines": v.get("lines", []),
                                        "attribution": v.get("attribution")}
                if v["status"] == "ok":
                    parts["vlm_judge"] = v["score"] / 10.0
                    if cfg.vlm_local:
                        scoring.add_ranked_lines(pen, v.get("lines", []), impacts(cfg.vlm_line_impacts))
                        if v.get("attribution") == "unavailable":
                            flags.append("judge_unavailable")
                        elif v.get("attribution") == "unparseable":
                            flags.append("judge_unparseable")
                else:
                    parts["vlm_judge"] = 0.0
                    flags.append("judge_unavailable" if v["status"] == "unavailable" else "judge_unparseable")
        finally:
            if llm_task is not None:
                llm_task.cancel()

        values = scoring.spread(pen, n_lines, cfg.decay_window)
        local = scoring.line_spans(code, ex.start, ex.end, values)
        if not compiled:
            flags.append("compile_failed")
        return ItemResult(score=float(sum(parts.values())), parts=parts, local=local, info=info, flags=flags)


def truncated_result(cfg: ReactConfig, info: dict, use_vlm: bool) -> ItemResult:
    """A response cut off inside its think block: part ``think_truncated`` (``think_truncated_score``, as low as a
    finished component with a syntax error), and ``vlm_judge``'s no-screenshot score when the VLM judge is on, as
    any component that does not compile gets; nothing to compile, lint or judge, no spans."""
    info["extraction"]["reason"] = "cut off inside the think block"
    parts = {"think_truncated": cfg.think_truncated_score}
    if use_vlm:
        parts["vlm_judge"] = cfg.vlm_failure_score
    return ItemResult(score=float(sum(parts.values())), parts=parts, info=info, flags=["think_truncated"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m reward_servers.react", description=__doc__)
    add_common_args(p, default_port=8801)
    add_args(p)
    args = p.parse_args(argv)
    serve(ReactScorer(from_args(args)), args)
