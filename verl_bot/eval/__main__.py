"""Evaluation CLI: ``python -m verl_bot.eval <subcommand> ...`` (``--help`` on each for every option).

    generate      --model DIR --data PARQUET --out GEN.jsonl [--n 4 --temperature 1.0 --max-new-tokens 512 ...]
    compile-rate  (--generations GEN.jsonl | --model DIR --data PARQUET [sampling]) --out REPORT.json
                  [--server http://127.0.0.1:8801]                                  React reward server
    winrate       --a GEN_A.jsonl --b GEN_B.jsonl --out REPORT.json [--name-a bot --name-b grpo]
                  [--server URL] [--judge-url http://127.0.0.1:8000/v1 --judge-model M --judge-key K]
    passk         --generations GEN.jsonl --out REPORT.json [--k 1,2,4] [--server http://127.0.0.1:8802]
    plot compile-rate --run bot=RUN_DIR_OR_METRICS.jsonl --run grpo=... --out FIG.png
                  [--metric reward/solved/mean --ylabel L]
    plot winrate  --result [LABEL=]WINRATE.json ... --out FIG.png
    plot passk    --result NAME=PASSK.json ... --out FIG.png

What each writes and prints, and its errors (one ``error: ...`` line, exit code 2): docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from verl_bot.eval.records import EvalError, read_generations, read_json, write_json, write_jsonl

REACT_URL = os.environ.get("REACT_REWARD_URL", "http://127.0.0.1:8801")
MATH_URL = os.environ.get("MATH_REWARD_URL", "http://127.0.0.1:8802")
JUDGE_ENV_PREFIX = "EVAL_JUDGE_"


# ------------------------------------------------------------------------------------------------ arguments
def _sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation (transformers)")
    g.add_argument("--model", help="Hugging Face model directory (a merged verl checkpoint or any HF dir)")
    g.add_argument("--data", help="verl parquet file with a 'prompt' chat-list column")
    g.add_argument("--n", type=int, default=1, help="samples per prompt (default 1)")
    g.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1.0)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: the --recipe's response length, else 512")
    g.add_argument("--chat-template-kwargs", default=None, help="the chat template's options as JSON, as the run "
                   "trained with them (verl's data.apply_chat_template_kwargs); default: the --recipe's, else {}")
    g.add_argument("--recipe", default=None, help="a recipe (e.g. aime_smollm, or recipes/aime_smollm.sh): its "
                   "template options and response length are the defaults (evaluation sees the prompts training saw)")
    g.add_argument("--batch-size", type=int, default=8, help="sequences per generate call")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    g.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    g.add_argument("--dtype", default="auto", help="auto (bfloat16 on cuda, float32 on cpu), float16, ...")


def _server_args(p: argparse.ArgumentParser, default_url: str, what: str) -> None:
    g = p.add_argument_group(what)
    g.add_argument("--server", default=default_url, help=f"base URL (default {default_url})")
    g.add_argument("--token", default=None, help="bearer token (default: env REWARD_SERVER_TOKEN)")
    g.add_argument("--score-batch-size", type=int, default=32, help="items per /score request")
    g.add_argument("--timeout-s", type=float, default=600.0, help="per /score request")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m verl_bot.eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="sample responses for a parquet file's prompts")
    _sampling_args(p)
    p.add_argument("--out", required=True, help="generation JSONL to write")

    p = sub.add_parser("compile-rate", help="React compile rate through the React reward server")
    p.add_argument("--generations", help="generation JSONL (else --model and --data: generate first)")
    _sampling_args(p)
    p.add_argument("--save-generations", help="with --model: where to keep the rows (default OUT.generations.jsonl)")
    _server_args(p, REACT_URL, "React reward server")
    p.add_argument("--out", required=True, help="report JSON")

    p = sub.add_parser("winrate", help="4-round ABBA pairwise VLM win rate of run A over run B")
    p.add_argument("--a", required=True, help="generation JSONL of run A")
    p.add_argument("--b", required=True, help="generation JSONL of run B")
    p.add_argument("--name-a", default="A")
    p.add_argument("--name-b", default="B")
    _server_args(p, REACT_URL, "React reward server (renders the screenshots)")
    g = p.add_argument_group(
        f"VLM judge (OpenAI-compatible, e.g. vllm serve; env {JUDGE_ENV_PREFIX}BASE_URL, "
        f"_MODEL, _API_KEY or OPENAI_API_KEY, _TIMEOUT_S, _MAX_RETRIES, _MAX_TOKENS)"
    )
    g.add_argument("--judge-url", default=None, help="base URL including /v1 (default http://127.0.0.1:8000/v1)")
    g.add_argument("--judge-model", default=None, help="default: the first model the endpoint lists")
    g.add_argument("--judge-key", default=None)
    g.add_argument("--judge-concurrency", type=int, default=None, help="requests in flight (default 16)")
    p.add_argument("--out", required=True, help="report JSON")

    p = sub.add_parser("passk", help="AIME pass@k through the math reward server")
    p.add_argument("--generations", required=True, help="generation JSONL, n samples per problem")
    p.add_argument("--k", default="1,2,4", help="comma-separated k values (default 1,2,4)")
    _server_args(p, MATH_URL, "math reward server")
    p.add_argument("--out", required=True, help="report JSON")

    p = sub.add_parser("plot", help="paper-style PNG figures")
    plots = p.add_subparsers(dest="figure", required=True)
    q = plots.add_parser("compile-rate", help="a training metric over steps, one line per run")
    q.add_argument("--run", action="append", required=True, help="NAME=PATH: run dir or verl file-logger JSONL")
    q.add_argument("--metric", default="reward/solved/mean", help="metric key (default reward/solved/mean)")
    q.add_argument("--title", default=None)
    q.add_argument("--ylabel", default=None, help="default: 'compile rate' for the default metric, else the key")
    q.add_argument("--out", required=True, help="PNG to write (its data goes to the same name .json)")
    q = plots.add_parser("winrate", help="win/tie/loss bars of winrate reports")
    q.add_argument("--result", action="append", required=True, help="[LABEL=]winrate JSON (default 'A vs B')")
    q.add_argument("--out", required=True)
    q = plots.add_parser("passk", help="pass@k curves of passk reports")
    q.add_argument("--result", action="append", required=True, help="NAME=passk JSON")
    q.add_argument("--out", required=True)
    return parser


# ------------------------------------------------------------------------------------------------ commands
def _named(items: Sequence[str], what: str, need_name: bool = True) -> dict[str, str]:
    """NAME=PATH arguments -> {name: path}; without '=' the name is None-keyed by the path when allowed."""
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            if need_name:
                raise EvalError(f"{what} {item!r} is not NAME=PATH")
            name, path = "", item
        out[name or path] = path
    return out


def _client_kwargs(args) -> dict:
    """Keyword arguments of reward_client.score_rows from the server options."""
    return {"token": args.token, "batch_size": args.score_batch_size, "timeout_s": args.timeout_s}


def _sampling(args) -> dict:
    """Keyword arguments of generate.generate from the generation options (the recipe's, where not given)."""
    from verl_bot.eval.recipe import recipe_settings

    recipe = recipe_settings(args.recipe) if args.recipe else {}
    if args.chat_template_kwargs is not None:
        try:
            template_kwargs = json.loads(args.chat_template_kwargs)
        except ValueError as e:
            raise EvalError(f"--chat-template-kwargs is not JSON: {e}") from None
    else:
        template_kwargs = recipe.get("template_kwargs", {})
    return {
        "n": args.n,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens or recipe.get("max_new_tokens", 512),
        "batch_size": args.batch_size,
        "seed": args.seed,
        "template_kwargs": template_kwargs,
    }


def _generate_rows(args) -> list[dict]:
    """Generation rows for --model and --data (EvalError when either is missing)."""
    from verl_bot.eval.generate import generate_from_files

    if not args.model or not args.data:
        raise EvalError("give --model DIR and --data PARQUET")
    return generate_from_files(
        args.model, args.data, limit=args.limit, device=args.device, dtype=args.dtype, **_sampling(args)
    )


def cmd_generate(args) -> str:
    """generate: write the generation JSONL; returns the summary line."""
    t0 = time.perf_counter()
    rows = _generate_rows(args)
    write_jsonl(args.out, rows)
    prompts = len({r["prompt_index"] for r in rows})
    return f"generate: {len(rows)} rows ({prompts} prompts x {args.n}) -> {args.out} in {time.perf_counter() - t0:.1f}s"


def cmd_compile_rate(args) -> str:
    """compile-rate: score a JSONL (or generate one first) through the React server; write the report."""
    from verl_bot.eval.compile_rate import compile_rate

    if args.generations and args.model:
        raise EvalError("give either --generations or --model/--data, not both")
    if args.generations:
        rows, source = read_generations(args.generations), {"generations": args.generations}
    else:
        rows = _generate_rows(args)
        saved = args.save_generations or str(Path(args.out).with_suffix(".generations.jsonl"))
        write_jsonl(saved, rows)
        source = {"generations": saved, "model": args.model, "data": args.data, "sampling": _sampling(args)}
    report = {**source, **compile_rate(rows, args.server, **_client_kwargs(args))}
    write_json(args.out, report)
    return (
        f"compile rate {report['compile_rate']:.3f} ({report['n_compiled']}/{report['n_items']} items, "
        f"{report['n_prompts']} prompts, {report['n_errors']} errors) -> {args.out}"
    )


def cmd_winrate(args) -> str:
    """winrate: render both runs, ABBA-judge the pairs; write the report."""
    from reward_servers.common.judge import JudgeConfig
    from verl_bot.eval.winrate import winrate

    judge = JudgeConfig.from_env(
        JUDGE_ENV_PREFIX,
        base_url=args.judge_url,
        model=args.judge_model,
        api_key=args.judge_key,
        max_concurrency=args.judge_concurrency,
    )
    rows_a, rows_b = read_generations(args.a), read_generations(args.b)
    report = winrate(rows_a, rows_b, args.server, judge, (args.name_a, args.name_b), **_client_kwargs(args))
    write_json(args.out, {"generations_a": args.a, "generations_b": args.b, **report})
    return (
        f"win rate of {args.name_a} over {args.name_b} {report['win_rate']:.3f}, tie rate {report['tie_rate']:.3f}"
        f" ({report['wins']}-{report['ties']}-{report['losses']} over {report['n_pairs']} pairs, "
        f"{report['n_judged']} judged) -> {args.out}"
    )


def cmd_passk(args) -> str:
    """passk: score a JSONL through the math server; write the pass@k report."""
    from verl_bot.eval.passk_report import passk

    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        raise EvalError(f"--k {args.k!r} is not a comma-separated list of integers") from None
    if not ks or min(ks) < 1:
        raise EvalError("--k needs integers >= 1")
    report = {
        "generations": args.generations,
        **passk(read_generations(args.generations), args.server, ks, **_client_kwargs(args)),
    }
    write_json(args.out, report)
    table = ", ".join(f"{k} {v:.3f}" for k, v in report["pass@k"].items()) or "no k <= the samples per problem"
    skipped = f"; skipped k {report['skipped_k']} (too few samples)" if report["skipped_k"] else ""
    counts = f"{report['n_problems']} problems, {report['n_samples']} samples, {report['n_errors']} errors"
    return f"{table} ({counts}{skipped}) -> {args.out}"


def _report(path: str, keys: Sequence[str], what: str) -> dict:
    """A JSON report checked for ``keys`` (EvalError naming the file otherwise)."""
    rep = read_json(path)
    missing = [k for k in keys if k not in rep]
    if missing:
        raise EvalError(f"{path}: not a {what} report (missing {', '.join(missing)})")
    return rep


def cmd_plot(args) -> str:
    """plot: draw one figure; write the PNG and the drawn data as JSON next to it."""
    from verl_bot.eval import figures

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.figure == "compile-rate":
        drawn = figures.compile_rate_figure(_named(args.run, "--run"), out, args.metric, args.title, args.ylabel)
        data = {"metric": args.metric, "runs": _named(args.run, "--run"), "series": drawn}
    elif args.figure == "winrate":
        keys = ("win_rate", "tie_rate", "wins", "ties", "losses", "n_pairs", "a", "b")
        reports = {}
        for label, path in _named(args.result, "--result", need_name=False).items():
            rep = _report(path, keys, "winrate")
            reports[f"{rep['a']} vs {rep['b']}" if label == path else label] = rep
        data = figures.winrate_figure(reports, out)
    else:
        reports = {name: _report(path, ("pass@k",), "passk") for name, path in _named(args.result, "--result").items()}
        data = {"series": figures.passk_figure(reports, out)}
    write_json(out.with_suffix(".json"), data)
    series = len(data.get("series") or data.get("comparisons") or [])
    return f"plot {args.figure}: {series} series -> {out} (data {out.with_suffix('.json')})"


COMMANDS = {
    "generate": cmd_generate,
    "compile-rate": cmd_compile_rate,
    "winrate": cmd_winrate,
    "passk": cmd_passk,
    "plot": cmd_plot,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the exit code (0, or 2 with one ``error:`` line on stderr)."""
    args = build_parser().parse_args(argv)
    try:
        print(COMMANDS[args.command](args), flush=True)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
