"""The documentation holds together: doc/index.md lists every page, and every relative link
of the README and of doc/ leads to a file that exists (and, with an anchor, to a heading of
that page)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "doc"
PAGES = sorted(p for p in DOC.rglob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_the_index_lists_every_page():
    listed = {(DOC / target).resolve() for target in _links(DOC / "index.md")}
    missing = [str(p.relative_to(ROOT)) for p in PAGES if p != DOC / "index.md" and p not in listed]
    assert missing == []


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_relative_link_leads_somewhere(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(target)
        elif anchor and found.suffix == ".md" and anchor not in _anchors(found):
            broken.append(target)
    assert broken == []
