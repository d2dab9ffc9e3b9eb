"""Every capability page in docs/ opens with a runnable example: right after its title and at
most two lines of introduction, a `bash` block of `payoff` commands or a `python` block, of at
most ten lines. What the example names exists: each `payoff train NAME` a shipped recipe
(payoff/recipes/*.yaml) or an algorithm `payoff train` accepts, and each Python block compiles
and imports only names payoff has. Nothing is trained here."""

from __future__ import annotations

import ast
import importlib
import re
import shlex
from pathlib import Path

import pytest

from payoff.recipes import RECIPE_DIR, algorithm_named

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Reference pages rather than capability pages: measured tables and the map of the code.
REFERENCE = {"benchmarks.md", "architecture.md"}
PAGES = sorted(p for p in DOCS.glob("*.md") if p.name not in REFERENCE)
OPENING = re.compile(
    r"\A# [^\n]+\n(?P<intro>.*?)^```(?P<language>\w*)\n(?P<body>.*?)^```", re.S | re.M
)
MAX_INTRO_LINES = 2
MAX_EXAMPLE_LINES = 10


def opening_problems(text: str) -> list[str]:
    """What keeps a page's text from opening with a short runnable example (empty if none)."""
    match = OPENING.match(text)
    if match is None:
        return ["no '# title' line followed by a fenced example"]
    intro = [line for line in match["intro"].splitlines() if line.strip()]
    body = match["body"].strip().splitlines()
    problems = []
    if len(intro) > MAX_INTRO_LINES:
        problems.append(f"{len(intro)} lines before the example, at most {MAX_INTRO_LINES}")
    if any(line.startswith("#") for line in intro):
        problems.append("a heading before the example")
    if not 1 <= len(body) <= MAX_EXAMPLE_LINES:
        problems.append(f"the example has {len(body)} lines, 1 to {MAX_EXAMPLE_LINES}")
    if match["language"] == "python":
        problems += python_problems("\n".join(body))
    elif match["language"] == "bash":
        problems += command_problems(body)
    else:
        problems.append(f"the example is {match['language'] or 'untagged'!r}, not bash or python")
    return problems


def command_problems(lines: list[str]) -> list[str]:
    """Each `payoff train NAME` names a shipped recipe, an algorithm or a .yaml file."""
    recipes = {path.stem for path in RECIPE_DIR.glob("*.yaml")}
    problems, commands = [], 0
    for line in lines:
        words = shlex.split(line, comments=True)
        for i in range(len(words) - 1):
            if words[i] != "payoff":
                continue
            commands += 1
            if words[i + 1] != "train" or i + 2 == len(words) or words[i + 2].startswith("-"):
                continue  # another subcommand, or `payoff train --resume RUN`
            name = words[i + 2]
            if name not in recipes and algorithm_named(name) is None and not name.endswith(".yaml"):
                problems.append(f"`payoff train {name}`: no recipe or algorithm {name!r}")
    if commands == 0:
        problems.append("a bash example without a `payoff` command")
    return problems


def python_problems(source: str) -> list[str]:
    """The block compiles, and every `from payoff... import X` finds X."""
    try:
        tree = compile(source, "<opening example>", "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as error:
        return [f"the Python example does not compile: {error}"]
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(alias.name, None) for alias in node.names if alias.name.startswith("payoff")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("payoff"):
            names = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module_name, attribute in names:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                problems.append(f"no module {module_name}")
                continue
            if attribute is not None and not hasattr(module, attribute):
                try:
                    importlib.import_module(f"{module_name}.{attribute}")
                except ImportError:
                    problems.append(f"{module_name} has no {attribute}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_opens_with_a_short_runnable_example(page: Path) -> None:
    assert opening_problems(page.read_text()) == []


def test_the_pages_are_found():
    assert len(PAGES) >= 15 and {"deep-rl.md", "llm-rl.md", "own-material.md"} <= {
        p.name for p in PAGES
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# T\n\none\ntwo\nthree\n\n```bash\npayoff train cartpole-ppo\n```\n", "3 lines before"),
        ("# T\n\n## Install\n\n```bash\npayoff train cartpole-ppo\n```\n", "a heading before"),
        ("# T\n\n```bash\n" + "payoff train cartpole-ppo\n" * 11 + "```\n", "has 11 lines"),
        ("# T\n\n```bash\npayoff train cartpole-ppp --seed 0\n```\n", "no recipe or algorithm"),
        ("# T\n\n```bash\nmake test\n```\n", "without a `payoff` command"),
        ("# T\n\n```yaml\nalgo: ppo\n```\n", "not bash or python"),
        ("# T\n\n```python\nfrom payoff import PPP\n```\n", "payoff has no PPP"),
        ("# T\n\n```python\nagent = PPO(\n```\n", "does not compile"),
        ("# T\n\nSome prose and no example.\n", "no '# title' line"),
    ],
)
def test_the_checks_catch_a_bad_opening(text: str, problem: str) -> None:
    assert any(problem in found for found in opening_problems(text)), opening_problems(text)


def test_a_good_opening_passes():
    text = (
        "# T\n\nOne line of intro.\n\n```bash\npayoff train ppo env.id=Acrobot-v1\n"
        "payoff train recurrent-ppo\npayoff train --resume runs/x  # a comment\n"
        "PAYOFF_LOGGERS=none payoff train frozenlake-q\n```\n"
    )
    assert opening_problems(text) == []
    assert opening_problems("# T\n\n```python\nfrom payoff import PPO\nPPO\n```\n") == []
