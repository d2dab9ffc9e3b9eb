"""Every capability page in docs/ opens with a runnable example of at most ten lines, and what
that example names exists: each `payoff train NAME` a shipped recipe or an algorithm, each
Python block compiles and imports only names payoff has."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from payoff.algos import available_algorithms
from payoff.recipes import recipe_names

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Reference pages rather than capability pages: measured tables and the map of the code.
REFERENCE = {"benchmarks.md", "architecture.md"}
PAGES = sorted(p for p in DOCS.glob("*.md") if p.name not in REFERENCE)
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)


def opening_block(page: Path) -> tuple[str, str]:
    """The page's first fenced block, which must start within its first 14 lines."""
    text = page.read_text()
    match = FENCE.search(text)
    assert match is not None, f"{page.name} has no example"
    line = text[: match.start()].count("\n") + 1
    assert line <= 14, f"{page.name}: its first example starts at line {line}, not at the top"
    return match.group(1), match.group(2)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_opens_with_a_short_runnable_example(page: Path) -> None:
    language, body = opening_block(page)
    lines = body.strip().splitlines()
    assert 1 <= len(lines) <= 10, f"{page.name}: its opening example has {len(lines)} lines"
    if language == "python":
        tree = ast.parse(body, filename=f"{page.name} (opening example)")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("payoff"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{page.name}: {node.module}.{alias.name}"
        return
    known = set(recipe_names()) | set(available_algorithms())
    for name in re.findall(r"payoff train (?!--)([\w.-]+)", body):
        assert name in known or name.endswith(".yaml"), f"{page.name}: no recipe {name!r}"
