"""Nothing in the README and docs/ rots: what they name exists.

- every relative link and image resolves (a link's `#anchor` to a heading of its page), every image is committed,
  and every docs page is linked from the README and from docs/index.md;
- every repository path they name (`verl_bot/...`, `recipes/...`, braces and `<placeholders>` expanded) exists;
- every `--flag` of a command of this repository (`python -m verl_bot.eval <subcommand>` through its own parser,
  other modules and scripts by their source and the repository modules they import) exists, and every `make X` is a
  target of the Makefile;
- every environment variable set on a command line or named in backticks is read by the recipes or the code;
- every Hydra key: verl-bot's `+algorithm.*` knobs and `reward.reward_kwargs.bot.*` keys are the code's
  (`tests/repo/test_docs_knobs.py`), verl's keys exist in verl's composed default config, and a `+key` is one verl's
  config does not have (Hydra refuses to add a key that exists).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib.util
import itertools
import re
import subprocess
from functools import cache
from pathlib import Path

import yaml

from tests.harness.docs import anchors
from tests.harness.knobs import MANAGER, algorithm_knobs, manager_knob, manager_knobs
from verl_bot.eval.__main__ import build_parser
from verl_bot.launch.activation import KNOB_PREFIXES

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("verl_bot", "verl_bot_vllm", "recipes", "benchmarks", "tests", "docs", "results", "reward_servers", "scripts")
LINK = re.compile(r"\]\(([^)\s]+)\)")  # the target of a link or an image, also of an image inside a link
CODE = re.compile(r"``(.+?)``|`([^`\n]+)`")
# a path ends in a file name with an extension or in `/` (a folder): `verl_bot/scorer_failed_rows` is a metric
PATH = re.compile(rf"(?<![\w./~-])((?:{'|'.join(TOP)})/(?:[\w./{{}},*<>-]*\.[\w{{}},*<>]*[\w}}*>]|[\w./{{}},*<>-]*/))")
COMMAND = re.compile(r"(?:^|[\s(])(?:\S*/)?python3? (?:-m ([\w.]+)|(\S+\.py))((?: +[^\s|;&#]+)*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
ENV_SET = re.compile(r"(?<![\w$.{/-])([A-Z][A-Z0-9_]+)=")
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]+\*?")  # a span that is a variable's name (`STEPS`, `EVAL_JUDGE_*`)
HYDRA = re.compile(r"(?<![\w./+-])(\+?)((?:algorithm|actor_rollout_ref|data|reward|trainer|critic|distillation)"
                   r"\.[\w.{},*<>]*[\w}*>])")
FREE_FORM = ("reward.reward_kwargs",)  # read by verl's reward loop (experimental/reward_loop), not in its yaml
OUR_ALGORITHM_KEYS = (*KNOB_PREFIXES, "token_report_", "token_panel_")
FILE_NAME = re.compile(r"\.(png|md|json|jsonl|py|sh|html|csv|txt|parquet|yaml)$")
VERL_CONFIG = "verl/trainer/config/_generated_ppo_trainer.yaml"


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT) if page.is_relative_to(ROOT) else page)


@cache
def tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return tuple(out.splitlines())


def expand(pattern: str) -> list[str]:
    """`a_{x,y}.sh` -> [`a_x.sh`, `a_y.sh`]; `<task>` -> `*` (a glob)."""
    pattern = re.sub(r"<[^>]*>", "*", pattern)
    parts = re.split(r"\{([^{}]*,[^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


@cache
def tracked_folders() -> tuple[str, ...]:
    return tuple(sorted({str(parent) for f in tracked() for parent in Path(f).parents if str(parent) != "."}))


def exists(path: str) -> bool:
    """Every expansion of `path` (a glob) matches a tracked file or folder of the repository."""
    return all(fnmatch.filter(tracked(), p) or fnmatch.filter(tracked_folders(), p) for p in expand(path.rstrip("/")))


def code_spans(text: str) -> list[str]:
    """Inline code and code-block lines (a trailing backslash joins the next line)."""
    spans = [a or b for a, b in CODE.findall(text)]
    block = [line.strip() for line in text.splitlines() if line.startswith("    ") or line.startswith("\t")]
    fenced = re.findall(r"^```\w*\n(.*?)^```", text, flags=re.M | re.S)
    lines = block + [line for body in fenced for line in body.splitlines()]
    return spans + re.sub(r"\s*\\\n\s*", " ", "\n".join(lines)).splitlines()


# ------------------------------------------------------------------------------------------ links and paths
def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(_text(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{_rel(page)}: {target}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{_rel(page)}: {target} (no such heading)")
    return bad


def uncommitted_images(page: Path) -> list[str]:
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", _text(page))
    files = [(page.parent / i).resolve().relative_to(ROOT) for i in images if not re.match(r"[a-z]+:", i)]
    return [f"{_rel(page)}: {f}" for f in files if str(f) not in tracked()]


def missing_paths(page: Path) -> list[str]:
    text = _text(page).replace("<br/>", " ")  # the data-flow picture's line breaks
    return [f"{_rel(page)}: {p}" for p in PATH.findall(text) if not exists(p.rstrip("."))]


# ------------------------------------------------------------------------------------------ flags
@cache
def eval_flags() -> dict[tuple[str, ...], set[str]]:
    """(subcommand, ...) -> the option strings `python -m verl_bot.eval` accepts there."""
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        found[path] = {s for a in parser._actions for s in a.option_strings}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def module_files(module: str) -> list[Path]:
    """The files of a module of this repository (a package: its folder), [] for any other module."""
    base = ROOT / module.replace(".", "/")
    if base.is_dir():
        return sorted(base.rglob("*.py"))
    return [base.with_suffix(".py")] if base.with_suffix(".py").is_file() else []


def program_source(module: str | None, script: str | None) -> str | None:
    """The source of a program of this repository (a script, or a module's files) and of the repository modules
    it imports (where its options may be defined), else None."""
    files = [ROOT / script.removeprefix("./")] if script else module_files(module)
    files = [f for f in files if f.is_file()]
    if not files:
        return None
    imported = {n.module for f in files for n in ast.walk(ast.parse(f.read_text()))
                if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    return "\n".join(p.read_text() for p in files + [p for m in sorted(imported) for p in module_files(m)])


def unknown_flags(command: str) -> list[str]:
    found = []
    for module, script, args in COMMAND.findall(command):
        flags = FLAG.findall(args)
        if module == "verl_bot.eval":
            words = [w for w in args.split() if not w.startswith("-")]
            path = tuple(itertools.takewhile(lambda w: w in {p for k in eval_flags() for p in k}, words))
            known = eval_flags().get(path, set())
            found += [f"{command[:60]}: {f}" for f in flags if f not in known]
            continue
        source = program_source(module or None, script or None)
        if source is not None:
            found += [f"{command[:60]}: {f}" for f in flags if f'"{f}"' not in source and f"'{f}'" not in source]
    return found


# ------------------------------------------------------------------------------------------ environment variables
@cache
def code_corpus() -> str:
    """The recipes, the code, the benchmarks, the scripts and the Makefile (what reads a variable)."""
    kinds = (".sh", ".py", ".txt")
    files = [f for f in tracked() if f.endswith(kinds) and not f.startswith("tests/")] + ["Makefile"]
    return "\n".join((ROOT / f).read_text(errors="replace") for f in files)


def read_by_code(name: str) -> bool:
    """The code names the variable, or builds it from a `*_PREFIX = "..."` constant and the rest of its name."""
    corpus = code_corpus()
    if re.search(rf"\b{re.escape(name.rstrip('*'))}", corpus):
        return True
    prefixes = re.findall(r'_PREFIX = "([A-Z][A-Z0-9_]*_)"', corpus)
    return any(name.startswith(p) and re.search(rf"}}{name.removeprefix(p)}\b", corpus) for p in prefixes)


def unread_variables(span: str) -> list[str]:
    names = set(ENV_SET.findall(span)) | ({span.split("=")[0]} if ENV_NAME.fullmatch(span.split("=")[0]) else set())
    return [n for n in sorted(names) if not read_by_code(n)]


# ------------------------------------------------------------------------------------------ Hydra keys
@cache
def verl_config() -> dict:
    spec = importlib.util.find_spec("verl")
    return yaml.safe_load((Path(spec.submodule_search_locations[0]).parent / VERL_CONFIG).read_text())


def _walk(key: str) -> tuple[bool, object]:
    """(whether `key` is in verl's config, the node of its longest prefix there)."""
    node: object = verl_config()
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, node
        node = node[part]
    return True, node


@cache
def our_keys() -> tuple[frozenset[str], frozenset[str]]:
    """verl-bot's `algorithm` knobs and the `bot` manager's keys (`tests/repo/test_docs_knobs.py`)."""
    return frozenset(algorithm_knobs()), frozenset(manager_knobs())


def _ours(name: str, knobs: frozenset[str]) -> bool:
    return any(fnmatch.fnmatchcase(k, p) for p in expand(name) for k in knobs)


def placeholders(key: str) -> str:
    """`<name>` -> `*`; a placeholder the key's match cut (`grail_<symmetry, leaf or answer>`) -> `*`; the end of
    a placeholder around the key (`<trainer.default_local_dir>`) dropped."""
    key = re.sub(r"<[^<>]*>", "*", key)
    return re.sub(r"<.*$", "*", key).split(">")[0]


def bad_key(plus: str, key: str) -> str | None:
    """Why a Hydra key a page names cannot be set, or None."""
    key = placeholders(key.rstrip("."))
    head, _, rest = key.partition(".")
    if FILE_NAME.search(key) or rest.startswith("*"):  # a file (`reward.png`), or any key (`algorithm.<name>`)
        return None
    if head == "algorithm" and rest.split(".")[0].startswith(OUR_ALGORITHM_KEYS):
        return None if _ours(rest.split(".")[0], our_keys()[0]) else "no such verl-bot knob"
    if key.startswith(MANAGER):
        name = manager_knob(key.removeprefix(MANAGER))  # `prm` alone: the group of the prm.* knobs
        return None if _ours(name, our_keys()[1]) or _ours(f"{name}.*", our_keys()[1]) else "no such manager key"
    if key.startswith(FREE_FORM) or key in FREE_FORM:
        return None
    found, node = _walk(key)
    if plus:
        return "in verl's config already: set it without +" if found else None
    return None if found or (isinstance(node, dict) and not node) or node is None else "not in verl's config"


def bad_keys(page: Path) -> list[str]:
    text = _text(page)
    return [f"{_rel(page)}: {plus}{key}: {why}" for plus, key in HYDRA.findall(text) if (why := bad_key(plus, key))]


# ------------------------------------------------------------------------------------------ the tests
def test_every_link_and_image_resolves_and_every_image_is_committed():
    assert len(PAGES) >= 14
    bad = [b for page in PAGES for b in broken_links(page) + uncommitted_images(page)]
    assert not bad, "\n".join(bad)


def linked_pages(page: Path) -> set[Path]:
    return {(page.parent / t.partition("#")[0]).resolve() for t in LINK.findall(_text(page)) if t.partition("#")[0]}


def test_every_docs_page_is_linked_from_the_readme_and_the_index():
    pages = set(PAGES[1:])
    index = ROOT / "docs" / "index.md"
    assert pages - linked_pages(ROOT / "README.md") == set()
    assert pages - linked_pages(index) == {index}


def test_every_repository_path_exists():
    bad = [b for page in PAGES for b in missing_paths(page)]
    assert not bad, "\n".join(bad)


def test_every_flag_of_our_commands_exists():
    commands = [c for page in PAGES for c in code_spans(_text(page)) if COMMAND.search(c)]
    assert len(commands) >= 20
    bad = [b for c in commands for b in unknown_flags(c)]
    assert not bad, "\n".join(bad)


def test_every_make_target_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    named = {t for page in PAGES for span in code_spans(_text(page)) for t in re.findall(r"\bmake (\w+)", span)}
    assert {"demo", "test", "setup"} <= named and named <= targets, named - targets


def test_every_environment_variable_is_read_somewhere():
    bad = [f"{_rel(page)}: {n}" for page in PAGES for span in code_spans(_text(page)) for n in unread_variables(span)]
    assert not bad, "\n".join(bad)


def test_every_hydra_key_exists():
    bad = [b for page in PAGES for b in bad_keys(page)]
    assert not bad, "\n".join(bad)


def test_the_checks_catch_what_they_are_for(tmp_path):
    assert expand("recipes/react_{qwen,phi}.sh") == ["recipes/react_qwen.sh", "recipes/react_phi.sh"]
    assert exists("recipes/react_{qwen,smollm,phi}.sh") and exists("results/runs/<task>/<variant>/s<seed>.csv")
    assert not exists("recipes/react_{qwen,gpt}.sh") and exists("verl_bot/hooks/") and not exists("verl_bot/hook")
    assert unknown_flags("python -m verl_bot.eval passk --generations g.jsonl --k 1,2 --out p.json") == []
    assert unknown_flags("python -m verl_bot.eval plot passk --result a=b --seed 1 --out x.png")[0].endswith("--seed")
    assert unknown_flags("python benchmarks/compare.py run --tasks toy_lint --nope")[0].endswith("--nope")
    assert unknown_flags("vllm serve m --nope") == [] and unknown_flags("python -m verl.trainer.main_ppo --x") == []
    assert unread_variables("SMOKE=1 ALGO=bot NO_SUCH_VARIABLE=2 bash recipes/react_qwen.sh") == ["NO_SUCH_VARIABLE"]
    assert unread_variables("VERL_BOT_NO_SUCH") == ["VERL_BOT_NO_SUCH"] and unread_variables("EVAL_JUDGE_*") == []
    assert unread_variables("NOSUCH") == ["NOSUCH"] and unread_variables("STEPS") == []
    assert bad_key("+", "algorithm.bot_epsilon") is None and bad_key("+", "algorithm.bot_nope") is not None
    assert bad_key("+", "algorithm.pass_{format_coef,op}") is None and bad_key("+", "algorithm.vps_*") is None
    assert bad_key("+", MANAGER + "w_local") is None and bad_key("", MANAGER + "w_lokal") is not None
    assert bad_key("+", MANAGER + "prm.url") is None and bad_key("+", MANAGER + "prm.nope") is not None
    assert bad_key("", "actor_rollout_ref.actor.loss_agg_mode") is None and bad_key("", "trainer.use_v2") is not None
    assert bad_key("+", "trainer.total_epochs") is not None  # Hydra: "Could not append to config"
    assert bad_key("+", "reward.custom_reward_function.reward_kwargs.penalty") is None
    assert bad_key("", "algorithm.grail_<rollout_symmetry") is None and bad_key("", "algorithm.token_report_*") is None
    assert bad_key("", "reward.png") is None and bad_key("", "trainer.default_local_dir>") is None
    assert placeholders("algorithm.<estimator") == "algorithm.*" and placeholders("a.<b>.c") == "a.*.c"
    assert read_by_code("EVAL_JUDGE_BASE_URL") and not read_by_code("EVAL_JUDGE_NOPE")
    md = ".md"  # spelled apart: tests/repo/test_docs.py reads every *.md name of this file as a citation
    page = tmp_path / f"x{md}"
    page.write_text(f"[a](nope{md}) [b](#here) ![c](img.png) [![d](w.png)](y{md}#z)\n\n## Here\n")
    assert broken_links(page) == [f"{page}: {t}" for t in (f"nope{md}", "img.png", "w.png", f"y{md}#z")]
    assert missing_paths(ROOT / "docs" / "run_safety.md") == []  # its metric `verl_bot/zero_advantage_rows` is no path
    assert code_spans("`a`, ``b `c` d``\n\n    x \\\n      y\n") == ["a", "b `c` d", "x y"]
