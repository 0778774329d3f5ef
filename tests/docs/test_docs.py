"""The docs stay a small house: a short README, links that resolve, a generated configuration
page that matches the settings objects, and code comments that state contracts, not history."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
PACKAGES = ["specdec", "drafter_svc", "verifier_svc", "drafter_build", "bench", "deploy"]
README_MAX_BYTES = 12 * 1024

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
HISTORY = re.compile(r'\bstop [0-9]+|\(was |README,? "')  # history, or a pointer at a README heading


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines, in_fence = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose_lines(path):
        match = HEADING.match(line)
        if match:
            slug = _slug(match.group(2))
            count = seen.get(slug, 0)
            anchors.add(slug if count == 0 else f"{slug}-{count}")
            seen[slug] = count + 1
    return anchors


def _links(path: Path) -> list[str]:
    links = []
    for line in _prose_lines(path):
        line = re.sub(r"`[^`]*`", "", line)
        for match in LINK.finditer(line):
            links.append(match.group(1) or match.group(2))
    return links


def test_readme_is_a_door() -> None:
    assert README.stat().st_size <= README_MAX_BYTES, f"README.md is {README.stat().st_size} bytes"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for link in _links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{link}: no heading #{anchor}")
    assert not broken, f"{path.relative_to(REPO_ROOT)}: " + "; ".join(broken)


def test_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nowhere) [gone](missing.md)\n```\n[code](skipped.md)\n```\n")
    assert _links(page) == ["#title", "#nowhere", "missing.md"]
    assert _anchors(page) == {"title"}


def test_configuration_page_is_current() -> None:
    generator = _load("generate_configuration")
    assert generator.PAGE.read_text(encoding="utf-8") == generator.render(), (
        "docs/usage/configuration.md is stale: run `python docs/generate_configuration.py`"
    )


def test_configuration_page_lists_every_setting() -> None:
    generator = _load("generate_configuration")
    page = generator.render()
    for _, prefix, cls in generator._settings_classes():
        for name in (f.name for f in dataclasses.fields(cls)):
            assert f"`{prefix}{name.upper()}`" in page
            assert f"`--{name.replace('_', '-')}`" in page


def _comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal standing alone as a statement."""
    found = []
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
        elif token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            found.append((token.start[0], token.string))
        if token.type not in (tokenize.COMMENT,):
            previous = token.type
    return found


def test_history_finder_sees_history() -> None:
    source = 'def f():\n    """Cut at 3 (was 4)."""\n    x = "stop 5"  # stop 12 measured it\n    # see README, "Defaults"\n'
    assert [line for line, text in _comments_and_docstrings(source) if HISTORY.search(text)] == [2, 3, 4]


def test_comments_state_contracts_not_history() -> None:
    hits = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            for line, text in _comments_and_docstrings(path.read_text(encoding="utf-8")):
                if HISTORY.search(text):
                    hits.append(f"{path.relative_to(REPO_ROOT)}:{line}")
    assert not hits, "comments narrating history: " + ", ".join(hits)


def _load(script: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(script, DOCS / f"{script}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[script] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


def test_api_page_is_current() -> None:
    generator = _load("generate_api")
    assert generator.PAGE.read_text(encoding="utf-8") == generator.render(), (
        "docs/usage/api.md is stale: run `python docs/generate_api.py`"
    )


def test_api_page_lists_every_field() -> None:
    page = _load("generate_api").render()
    for proto in (REPO_ROOT / "protos" / "specdec" / "v1").glob("*.proto"):
        for name in re.findall(r"^\s*(?:optional |repeated )?[\w.]+\s+(\w+)\s*=\s*\d+\s*;", proto.read_text(), re.M):
            assert f"| `{name}` |" in page, f"{proto.name}: {name} missing from docs/usage/api.md"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_docs_state_how_things_are_not_sessions(path: Path) -> None:
    hits = [line for line in _prose_lines(path) if re.search(r"\bstop [0-9]+|\(was ", line)]
    assert not hits, f"{path.relative_to(REPO_ROOT)}: " + " | ".join(hits)
