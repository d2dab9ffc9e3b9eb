"""The layers of docs/architecture.md hold, and every algorithm's pictures have an owner.

The layers contract lives in pyproject.toml ([tool.importlinter]); `make lint` runs the same
check. Lazy (function-level) imports count: a drawing, a driver or a backend reached from
below breaks it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from payoff.algos import available_algorithms, get_algorithm
from payoff.algos.agent import Agent
from payoff.algos.base import Algorithm
from payoff.algos.shared.lm import LMAlgorithm
from payoff.report.figures import COMPARISONS, FIGURES

ROOT = Path(__file__).resolve().parents[1]


def test_the_layers_contract_holds() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache", "--config", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_figures_are_registered_under_real_algorithm_names() -> None:
    """A renamed algorithm must not silently lose its pictures."""
    unknown = sorted((set(FIGURES) | set(COMPARISONS)) - set(available_algorithms()))
    assert not unknown, f"report.figures names algorithms that do not exist: {unknown}"


def test_agents_and_language_models_have_their_own_interfaces() -> None:
    """Agents predict, evaluate on episodes and render GIFs; language models evaluate on
    task splits and render nothing. The base holds only what both share."""
    agents = {
        "a2c",
        "alphazero",
        "bc",
        "dagger",
        "dqn",
        "es",
        "ippo",
        "mbpo",
        "mbrl",
        "ppo",
        "ppo_lagrangian",
        "qlearning",
        "recurrent_ppo",
        "reinforce",
        "sac",
        "td3",
    }
    found = {name for name in available_algorithms() if issubclass(get_algorithm(name), Agent)}
    assert found == agents
    for method in ("predict", "act", "evaluate", "record_gif"):
        assert not hasattr(Algorithm, method), method
    assert not hasattr(LMAlgorithm, "record_gif")


def test_the_wheel_carries_every_data_file_payoff_reads():
    """Files payoff opens at run time (recipes, red-team specs) are package data: the
    red-team specs were not, so `payoff redteam boatrace` failed from a wheel."""
    import tomllib
    from pathlib import Path, PurePosixPath

    root = Path(__file__).resolve().parents[1]
    settings = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = [PurePosixPath(g) for g in settings["package-data"]["payoff"]]
    data = [
        PurePosixPath(p.relative_to(root / "payoff").as_posix())
        for p in (root / "payoff").rglob("*")
        if p.is_file() and p.suffix in (".yaml", ".yml", ".json", ".jinja", ".txt", ".md")
    ]
    assert data
    missing = [
        str(f)
        for f in data
        if not any(len(f.parts) == len(g.parts) and f.match(str(g)) for g in globs)
    ]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
