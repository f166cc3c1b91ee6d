"""Every link between the README, CONTRIBUTING.md and docs/ leads somewhere: the file
exists and, for ``#anchor``, so does the heading (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+://|^mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "## Contents" in text
    for words in ("at least once", "exactly once", "make run", "make test", "## Quickstart"):
        assert words in text, words


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_user_docs_carry_no_lab_notebook(page: Path) -> None:
    """No commit hashes, issue numbers or dated measurements in user documentation."""
    text = page.read_text()
    if page.name == "performance.md":  # the generated table quotes the bench's own labels
        text = re.sub(r"<!-- bench:begin.*?<!-- bench:end -->", "", text, flags=re.S)
    hashes = re.findall(r"`((?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40})`", text)
    assert not hashes, f"commit hashes: {hashes}"
    assert not re.findall(r"\b[Ii]ssue \d+", text), "an issue number"
    assert not re.findall(r"^Measured\b", text, re.M), "a lab-notebook paragraph"
