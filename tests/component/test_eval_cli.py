"""The evaluation CLI (`python -m verl_bot.eval`) end to end: the tiny model generating on CPU, the real React
reward server (esbuild + Chromium) and math reward server on loopback, the deterministic fake VLM judge.

Subcommands run in-process through `verl_bot.eval.__main__.main` (the CLI's own code path, without paying verl's
import once per call); one test runs `python -m verl_bot.eval` as a subprocess for the exit code.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from math import comb
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from reward_servers.common.fake_judge import FakeJudge, Rule
from reward_servers.common.service import ServerThread, create_app
from reward_servers.math.server import MathConfig, MathScorer
from reward_servers.react.config import ReactConfig
from reward_servers.react.server import ReactScorer
from tests.conftest import free_port
from verl_bot.eval.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
REACT_FIX = ROOT / "tests" / "fixtures" / "react"
BLANK = "```tsx\nexport default function App() {\n  return <div />;\n}\n```"
HELLO = "```tsx\nexport default function App() {\n  return <h1>Hello</h1>;\n}\n```"


def react_fixture(name: str) -> str:
    """A hand-written response of the React server's tests (tests/fixtures/react/, verdicts in cases.json)."""
    return (REACT_FIX / f"{name}.md").read_text()


def rows(prompts: dict[int, str], responses: dict[int, list[str]], data_source="react", gts=None) -> list[dict]:
    """Generation rows: prompt_index -> list of responses (sample_index = position)."""
    return [
        {
            "prompt_index": p,
            "sample_index": s,
            "data_source": data_source,
            "prompt": prompts[p],
            "response": r,
            "ground_truth": (gts or {}).get(p),
        }
        for p, rs in responses.items()
        for s, r in enumerate(rs)
    ]


def write_rows(path: Path, data: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return str(path)


def run_cli(*argv) -> tuple[int, dict | None]:
    """main(argv) -> (exit code, the --out JSON when written)."""
    code = main([str(a) for a in argv])
    out = Path(argv[argv.index("--out") + 1])
    report = out.with_suffix(".json") if out.suffix == ".png" else out
    return code, (json.loads(report.read_text()) if code == 0 and report.suffix == ".json" else None)


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# ------------------------------------------------------------------------------------------------ servers
@pytest.fixture(scope="module")
def react_url():
    """The real React reward server (judges not configured; the CLI switches them off per call anyway)."""
    scorer = ReactScorer(ReactConfig(compile_workers=1, render_slots=2, render_timeout_s=15.0), judges_from_env=False)
    with ServerThread(create_app(scorer), startup_timeout_s=120) as srv:
        yield srv.url


@pytest.fixture(scope="module")
def math_url():
    with ServerThread(create_app(MathScorer(MathConfig(workers=1)))) as srv:
        yield srv.url


def prefer_larger_page(messages) -> str:
    """Fake VLM: picks the screenshot with the larger PNG (more content); equal sizes -> always FIRST."""
    urls = [p["image_url"]["url"] for p in messages[-1]["content"] if p.get("type") == "image_url"]
    first, second = (len(base64.b64decode(u.split(",", 1)[1])) for u in urls)
    return "Reasoning...\nSECOND" if second > first else "Reasoning...\nFIRST"


@pytest.fixture(scope="module")
def vlm():
    with FakeJudge([Rule(reply=prefer_larger_page)], model="fake-vlm") as fj:
        yield fj


# ------------------------------------------------------------------------------------------------ generate
@pytest.fixture(scope="module")
def prompts_parquet(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "test.parquet"
    pd.DataFrame(
        [
            {
                "data_source": "react",
                "prompt": [{"role": "user", "content": f"Build widget {i}."}],
                "ability": "react",
                "reward_model": {"style": "rule", "ground_truth": None},
                "extra_info": {"index": i},
            }
            for i in range(3)
        ]
    ).to_parquet(path)
    return path


def tiny_sampling(model_dir, parquet, n: int) -> list:
    """CLI options: the tiny model, the prompt file, n samples of 8 new tokens."""
    return ["--model", model_dir, "--data", parquet, "--n", n, "--max-new-tokens", 8]


def test_generate_is_deterministic_for_a_seed(tiny_model_dir, prompts_parquet, tmp_path):
    args = ["generate", *tiny_sampling(tiny_model_dir, prompts_parquet, n=2), "--batch-size", 4]
    assert main([str(a) for a in [*args, "--seed", 1, "--out", tmp_path / "a.jsonl"]]) == 0
    assert main([str(a) for a in [*args, "--seed", 1, "--out", tmp_path / "b.jsonl"]]) == 0
    assert main([str(a) for a in [*args, "--seed", 2, "--out", tmp_path / "c.jsonl"]]) == 0
    a = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(a) == 3 * 2
    assert [(r["prompt_index"], r["sample_index"]) for r in a] == [(p, s) for p in range(3) for s in range(2)]
    assert [r["prompt"] for r in a] == [f"Build widget {p}." for p in range(3) for _ in range(2)]
    assert all(r["data_source"] == "react" and r["ground_truth"] is None and r["response"] for r in a)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert (tmp_path / "a.jsonl").read_text() != (tmp_path / "c.jsonl").read_text()


# ------------------------------------------------------------------------------------------------ compile rate
def test_compile_rate_of_hand_written_responses(react_url, tmp_path):
    # compiled per cases.json: todo_app, counter_tsx, class_component; not: syntax error, runtime throw,
    # a forbidden import, prose without a component
    data = rows(
        {0: "Todo app", 1: "Counter", 2: "Card"},
        {
            0: [react_fixture("todo_app"), react_fixture("syntax_error"), react_fixture("throws")],
            1: [react_fixture("counter_tsx"), react_fixture("import_fs")],
            2: [react_fixture("class_component"), react_fixture("prose_only")],
        },
    )
    gen = write_rows(tmp_path / "gen.jsonl", data)
    code, rep = run_cli("compile-rate", "--generations", gen, "--server", react_url, "--out", tmp_path / "cr.json")
    assert code == 0
    assert rep["compile_rate"] == pytest.approx(3 / 7) and (rep["n_items"], rep["n_compiled"]) == (7, 3)
    assert rep["n_prompts"] == 3 and rep["n_errors"] == 0
    compiled = {(i["prompt_index"], i["sample_index"]): i["compiled"] for i in rep["items"]}
    assert compiled == {
        (0, 0): True,
        (0, 1): False,
        (0, 2): False,
        (1, 0): True,
        (1, 1): False,
        (2, 0): True,
        (2, 1): False,
    }
    assert next(i for i in rep["items"] if i["prompt_index"] == 0 and i["sample_index"] == 2)["bundled"] is True


def test_compile_rate_of_a_checkpoint_generates_then_scores(tiny_model_dir, prompts_parquet, react_url, tmp_path):
    sampling = tiny_sampling(tiny_model_dir, prompts_parquet, n=1)
    code, rep = run_cli("compile-rate", *sampling, "--server", react_url, "--out", tmp_path / "cr.json")
    assert code == 0
    assert rep["n_items"] == 3 and rep["compile_rate"] == 0.0  # random weights write no component
    saved = Path(rep["generations"])
    assert saved == tmp_path / "cr.generations.jsonl" and len(saved.read_text().splitlines()) == 3


# ------------------------------------------------------------------------------------------------ win rate
@pytest.fixture(scope="module")
def winrate_report(react_url, vlm, tmp_path_factory):
    d = tmp_path_factory.mktemp("winrate")
    prompts = {i: f"Page {i}" for i in range(5)}
    a = rows(
        prompts,
        {
            0: [react_fixture("landing_page")],
            1: [HELLO],
            2: [react_fixture("syntax_error")],
            3: [react_fixture("import_fs")],
            4: [react_fixture("todo_app")],
        },
    )
    b = rows(
        prompts,
        {
            0: [BLANK],
            1: [HELLO],
            2: [react_fixture("counter_tsx")],
            3: [react_fixture("throws")],
            4: [react_fixture("prose_only")],
        },
    )
    vlm.reset()
    code, rep = run_cli(
        "winrate",
        "--a",
        write_rows(d / "a.jsonl", a),
        "--b",
        write_rows(d / "b.jsonl", b),
        "--name-a",
        "bot",
        "--name-b",
        "grpo",
        "--server",
        react_url,
        "--judge-url",
        vlm.base_url,
        "--out",
        d / "winrate.json",
    )
    assert code == 0
    return rep, vlm.count, d


def test_winrate_abba_and_render_failures(winrate_report):
    rep, judge_calls, _ = winrate_report
    # 0: judged, A's page is the fuller one -> A; 1: identical pages, the judge always says FIRST -> 2-2 tie;
    # 2: only B renders -> B without the judge; 3: neither renders -> tie; 4: only A renders -> A
    assert [p["score_a"] for p in rep["pairs"]] == [1.0, 0.5, 0.0, 0.5, 1.0]
    assert [p["decided_by"] for p in rep["pairs"]] == ["judge", "judge", "render", "render", "render"]
    assert rep["pairs"][0]["rounds"] == ["A", "A", "A", "A"] and rep["pairs"][1]["rounds"] == ["A", "B", "B", "A"]
    assert rep["win_rate"] == pytest.approx(3 / 5) and rep["tie_rate"] == pytest.approx(2 / 5)
    assert (rep["wins"], rep["ties"], rep["losses"], rep["n_judged"]) == (2, 2, 1, 2)
    assert judge_calls == 2 * 4 and (rep["a"], rep["b"]) == ("bot", "grpo")


def test_winrate_rejects_runs_on_different_prompts(winrate_report, tmp_path, capsys):
    _, _, d = winrate_report
    other = [
        dict(r, prompt="Something else") if r["prompt_index"] == 3 else r
        for r in map(json.loads, (d / "b.jsonl").read_text().splitlines())
    ]
    code = main(
        [
            "winrate",
            "--a",
            str(d / "a.jsonl"),
            "--b",
            write_rows(tmp_path / "b.jsonl", other),
            "--server",
            dead_url(),
            "--judge-url",
            dead_url() + "/v1",
            "--out",
            str(tmp_path / "w.json"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "different prompts" in err and "(3, 0)" in err and len(err.splitlines()) == 1


def test_winrate_judge_down_is_one_error_line(winrate_report, tmp_path, capsys):
    _, _, d = winrate_report
    code = main(
        [
            "winrate",
            "--a",
            str(d / "a.jsonl"),
            "--b",
            str(d / "b.jsonl"),
            "--judge-url",
            dead_url() + "/v1",
            "--out",
            str(tmp_path / "w.json"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: judge endpoint") and "unreachable" in err
    assert not (tmp_path / "w.json").exists()


# ------------------------------------------------------------------------------------------------ pass@k
def test_passk_through_the_math_server(math_url, tmp_path):
    right = "<step 1>3 * 11 = 33</step 1>\n<final>33</final>"
    data = rows(
        {0: "3 * 11?", 1: "3 + 4?", 2: "10 * 10?"},
        {
            0: [right, "<final>033</final>", "<step 1>guess</step 1>\n<final>34</final>", "I do not know."],
            1: ["so the answer is \\boxed{7}", "<final>8</final>", "<final>six</final>", "<final>70</final>"],
            2: ["<final>99</final>", "<final>101</final>", "no idea", "<final>1000</final>"],
        },
        data_source="aime",
        gts={0: "33", 1: 7, 2: "100"},
    )
    gen = write_rows(tmp_path / "gen.jsonl", data)
    code, rep = run_cli(
        "passk", "--generations", gen, "--server", math_url, "--k", "1,2,4,8", "--out", tmp_path / "pk.json"
    )
    assert code == 0
    assert [(p["n"], p["correct"]) for p in rep["problems"]] == [(4, 2), (4, 1), (4, 0)]
    cs = [2, 1, 0]

    def expected(k):  # 1 - C(n-c, k) / C(n, k), mean over problems
        return sum(1 - comb(4 - c, k) / comb(4, k) for c in cs) / 3

    assert rep["pass@k"] == pytest.approx({f"pass@{k}": expected(k) for k in (1, 2, 4)})
    assert rep["pass@k"]["pass@1"] == pytest.approx(0.25) and rep["pass@k"]["pass@2"] == pytest.approx(4 / 9)
    assert rep["skipped_k"] == [8] and rep["n_samples"] == 12 and rep["n_errors"] == 0
    (tmp_path / "pk_grpo.json").write_text(json.dumps({"pass@k": {"pass@1": 0.1, "pass@2": 0.15, "pass@4": 0.2}}))


# ------------------------------------------------------------------------------------------------ plots
def png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        assert im.format == "PNG"
        im.verify()
        return im.size


def test_plot_compile_rate_from_verl_file_logger(tmp_path):
    runs = {"bot": [0.2, 0.5, 0.8, 0.9], "grpo": [0.1, 0.2, 0.4, 0.6]}
    for name, values in runs.items():
        lines = [
            {"step": s, "data": {"reward/solved/mean": v, "reward/score/mean": -v}} for s, v in enumerate(values, 1)
        ]
        lines.insert(2, {"step": 2, "data": {"val-core/react/reward/mean@1": 0.3}})  # a line without the key
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "fig" / "compile.png"
    code, data = run_cli(
        "plot",
        "compile-rate",
        "--run",
        f"bot={tmp_path / 'bot'}",
        "--run",
        f"grpo={tmp_path / 'grpo' / 'metrics.jsonl'}",
        "--out",
        out,
    )
    assert code == 0 and png_size(out)[0] > 100
    assert list(data["series"]) == ["bot", "grpo"]
    for name, values in runs.items():
        assert data["series"][name] == {"x": [1, 2, 3, 4], "y": pytest.approx(values)}
    code, data = run_cli(
        "plot",
        "compile-rate",
        "--run",
        f"bot={tmp_path / 'bot'}",
        "--metric",
        "reward/score/mean",
        "--out",
        tmp_path / "score.png",
    )
    assert code == 0 and data["series"]["bot"]["y"] == pytest.approx([-v for v in runs["bot"]])


def test_plot_winrate_and_passk(winrate_report, tmp_path):
    rep, _, d = winrate_report
    other = {**rep, "a": "bot", "b": "gspo", "wins": 3, "ties": 1, "losses": 0, "n_pairs": 4, "win_rate": 0.875}
    (tmp_path / "other.json").write_text(json.dumps(other))
    out = tmp_path / "winrate.png"
    code, data = run_cli(
        "plot",
        "winrate",
        "--result",
        d / "winrate.json",
        "--result",
        f"vs GSPO={tmp_path / 'other.json'}",
        "--out",
        out,
    )
    assert code == 0 and png_size(out)[0] > 100
    assert data["comparisons"] == ["bot vs grpo", "vs GSPO"]
    assert data["bars"] == {"A wins": [0.4, 0.75], "ties": [0.4, 0.25], "B wins": [0.2, 0.0]}

    for name, table in {"bot": {"pass@1": 0.25, "pass@2": 0.44, "pass@4": 0.67}, "grpo": {"pass@1": 0.1}}.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"pass@k": table}))
    out = tmp_path / "passk.png"
    code, data = run_cli(
        "plot",
        "passk",
        "--result",
        f"bot={tmp_path / 'bot.json'}",
        "--result",
        f"grpo={tmp_path / 'grpo.json'}",
        "--out",
        out,
    )
    assert code == 0 and png_size(out)[0] > 100
    assert data["series"] == {"bot": {"x": [1.0, 2.0, 4.0], "y": [0.25, 0.44, 0.67]}, "grpo": {"x": [1.0], "y": [0.1]}}


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compile-rate", "--generations", "{tmp}/missing.jsonl"], "missing.jsonl: no such file"),
        (["compile-rate", "--generations", "{tmp}/empty.jsonl"], "empty.jsonl: no generation rows"),
        (["compile-rate", "--generations", "{tmp}/one.jsonl", "--server", "{dead}"], "unreachable"),
        (["passk", "--generations", "{tmp}/one.jsonl", "--server", "{dead}"], "unreachable"),
        (["passk", "--generations", "{tmp}/one.jsonl", "--k", "1,x"], "--k"),
        (["generate", "--model", "{tmp}", "--data", "{tmp}/missing.parquet"], "missing.parquet: no such file"),
        (["plot", "compile-rate", "--run", "{tmp}/one.jsonl"], "is not NAME=PATH"),
        (["plot", "compile-rate", "--run", "x={tmp}/one.jsonl"], "no step logs metric"),
        (["plot", "passk", "--result", "x={tmp}/one.jsonl"], "not a passk report"),
        (["plot", "passk", "--result", "x={tmp}/empty.jsonl"], "not JSON"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("\n")
    write_rows(tmp_path / "one.jsonl", rows({0: "p"}, {0: ["r"]}))
    subs = {"{tmp}": str(tmp_path), "{dead}": dead_url()}
    argv = [a.replace("{tmp}", subs["{tmp}"]).replace("{dead}", subs["{dead}"]) for a in argv]
    code = main([*argv, "--out", str(tmp_path / "out.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err


def test_python_m_entry_point_exit_code(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_bot.eval",
            "passk",
            "--generations",
            str(tmp_path / "no.jsonl"),
            "--out",
            str(tmp_path / "o.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'no.jsonl'}: no such file"
