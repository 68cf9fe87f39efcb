"""The README is read in five minutes and points to the rest: it stays short, every relative
link in it and in docs/ leads to a file that exists (and to a heading there when it names one),
every page under docs/ is reachable from the README, and the two commands it gives are the
ones the project runs (CI's `.ci/run`, and the fast loop's markers as pyproject declares them)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _links(page: Path) -> list[tuple[str, str]]:
    out = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        out.append((path, anchor))
    return out


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert 60 <= len(lines) <= 170, len(lines)


def test_every_relative_link_leads_somewhere():
    broken = []
    for page in [README, *DOCS]:
        for path, anchor in _links(page):
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(REPO)}: {path}")
                continue
            if anchor and target.suffix == ".md":
                headings = [_anchor(h) for h in re.findall(r"^#+ (.+)$", target.read_text(
                    encoding="utf-8"), flags=re.M)]
                if anchor not in headings:
                    broken.append(f"{page.relative_to(REPO)}: {path}#{anchor}")
    assert not broken, broken


def test_every_guide_is_linked_from_the_readme():
    linked = {(README.parent / path).resolve() for path, _ in _links(README) if path}
    assert DOCS, "docs/ has no pages"
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_the_readme_gives_the_commands_the_project_runs():
    text = README.read_text(encoding="utf-8")
    assert "```sh\nbash .ci/run\n```" in text
    assert (REPO / ".ci" / "run").is_file()
    fast = re.search(r'pytest -q -n 2 -m "([^"]+)"', text)
    assert fast, "the README lost the fast loop"
    markers = set(re.findall(r"not (\w+)", fast.group(1)))
    declared = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    for marker in markers:
        assert re.search(rf'^\s*"{marker}:', declared, flags=re.M), marker
    assert "ojai doctor" in text.split("## Tests")[0]  # install and run come first
