"""A Markdown page's anchors as GitHub makes them from its headings."""

import re
from pathlib import Path


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def anchors(md: Path) -> set[str]:
    """The anchors of the headings of the Markdown page `md`."""
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", md.read_text(encoding="utf-8"), flags=re.M)}
