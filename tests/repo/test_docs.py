"""The repository is self-contained: every document it cites is in it.

- no tracked file names the design notes outside the repository (the path is spelled in pieces here);
- every `*.md` a tracked file names exists: a path with a folder relative to the repository root or to the
  citing file; a bare upper-case name (`README.md`) beside the citing file or at the root; a bare lower-case
  name (a prompt file a module reads) somewhere in the repository;
- every `docs/...` path exists, and every `docs/X.md#anchor` link points at a heading of that file.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.harness.docs import anchors

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("shared" + "/design", "/work/" + "shared")
MD_REF = re.compile(r"(?<![\w{*/.-])((?:\.\./)*[A-Za-z0-9_][A-Za-z0-9_./-]*\.md)(#[a-z0-9_-]+)?\b")
DOCS_REF = re.compile(r"(?<![\w/.-])((?:\.\./)*docs/[A-Za-z0-9_./-]*[A-Za-z0-9_])")
BINARY = {".png", ".jpg", ".jpeg", ".parquet", ".ico", ".gif", ".woff", ".woff2", ".pdf"}


def _tracked() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    this = Path(__file__).resolve()  # this file holds counter-examples on purpose
    paths = [ROOT / n for n in names.splitlines() if Path(n).suffix not in BINARY and (ROOT / n).is_file()]
    return [p for p in paths if p.resolve() != this]


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def _resolves(ref: str, citing: Path, names: set[str]) -> Path | None:
    if "/" in ref:
        for base in (citing.parent, ROOT):
            if (base / ref).exists():
                return (base / ref).resolve()
        return None
    if ref[0].isupper():
        for base in (citing.parent, ROOT):
            if (base / ref).is_file():
                return base / ref
        return None
    return ROOT if ref in names else None


def test_no_file_cites_documents_outside_the_repository():
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for p in _tracked()
        for n, line in enumerate(_text(p).splitlines(), 1)
        if any(s in line for s in OUTSIDE)
    ]
    assert not offenders, "cites documents outside the repository:\n" + "\n".join(offenders)


def test_every_cited_document_exists():
    files = _tracked()
    names = {p.name for p in files}
    missing = []
    for path in files:
        for n, line in enumerate(_text(path).splitlines(), 1):
            for m in MD_REF.finditer(line):
                ref, anchor = m.group(1), m.group(2)
                target = _resolves(ref, path, names)
                if target is None:
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {ref}")
                elif anchor and target.suffix == ".md" and anchor[1:] not in anchors(target):
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {ref}{anchor} (no such heading)")
            for m in DOCS_REF.finditer(line):
                if _resolves(m.group(1), path, names) is None:
                    missing.append(f"{path.relative_to(ROOT)}:{n}: {m.group(1)}")
    assert not missing, "cited documents that are not in the repository:\n" + "\n".join(missing)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The reference rules reject a bare design-note name, a missing docs/ path and a wrong anchor."""
    citing = ROOT / "verl_bot" / "x.py"
    names = {p.name for p in _tracked()}
    assert _resolves("ALGORITHMS.md", citing, names) is None
    assert _resolves("docs/NOPE.md", citing, names) is None
    assert _resolves("docs/ALGORITHMS.md", citing, names) == ROOT / "docs" / "ALGORITHMS.md"
    assert _resolves("../../docs/REWARD_API.md", ROOT / "reward_servers" / "math" / "README.md", names)
    assert _resolves("README.md", ROOT / "reward_servers" / "math" / "server.py", names)
    assert "4-aime-rewards" in anchors(ROOT / "docs" / "ALGORITHMS.md")
    assert [m.group(1) for m in MD_REF.finditer("see `docs/X.md#a` and prompts/*.md and {name}.md")] == ["docs/X.md"]

