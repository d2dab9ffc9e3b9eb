"""payoff as a user installs it: the wheel built from this tree, in a fresh virtual environment.

An editable install reads every file from the source tree, so a data file missing from the
wheel (the red-team specs were, until 2026-12-08) passes every other test. Here the wheel is
built, checked to hold every file git tracks under payoff/, installed with `--no-deps` into a
new venv that borrows the project venv's packages (torch and the rest: nothing is
downloaded), and that venv's `payoff` console script runs three commands from a folder
outside the repository: `payoff recipes`, `payoff redteam boatrace` and a short `payoff train`.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout + out.stderr


def _git_files(*paths: str) -> list[str]:
    """The files git tracks, and untracked ones it does not ignore, under `paths`."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [name for name in listed if (ROOT / name).is_file()]


def _build_wheel(base: Path, env: dict[str, str]) -> Path:
    """payoff's wheel, built from a copy of the tree: a build folder left in the tree by an
    earlier build would carry files the package data leaves out."""
    try:
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
    except ImportError as err:  # pragma: no cover - the dev install has both
        pytest.skip(f"cannot build payoff's wheel here: {err} (pip install setuptools wheel)")
    source = base / "source"
    for name in _git_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    wheels = base / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    _run([*pip, "-w", str(wheels), str(source)], cwd=base, env=env, timeout=600)
    (built,) = wheels.glob("payoff-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv holding payoff's wheel; its folder, and an environment that keeps the
    source tree off sys.path."""
    base = tmp_path_factory.mktemp("packaging")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    built = _build_wheel(base, env)
    # Every file under payoff/ is shipped: a data file payoff reads that the package data
    # leaves out fails here even where the commands below do not read it.
    shipped = set(zipfile.ZipFile(built).namelist())
    missing = sorted(set(_git_files("payoff")) - shipped)
    assert not missing, (
        f"the wheel lacks {missing}: add them to [tool.setuptools.package-data] in pyproject.toml"
    )
    target = base / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    # Installed before the project venv is borrowed below, so pip sees an empty venv (not
    # the editable install) and writes bin/payoff to start this venv's python.
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    _run([*pip, "--no-index", "-q", str(built)], cwd=base, env=env)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The project venv's packages, after the new venv's own: a plain path line, so the
    # editable install's .pth and finder there are not run and `import payoff` finds the wheel.
    borrowed = [p for p in site.getsitepackages() if Path(p).is_dir()]
    borrowed += [sysconfig.get_paths()["purelib"]]
    Path(purelib, "_borrowed.pth").write_text("\n".join(dict.fromkeys(borrowed)) + "\n")
    return target, env


def _run_folder(runs: Path, name: str) -> Path:
    """The one run folder `payoff` made for `name` under `runs`, with its report."""
    made = sorted(runs.glob(f"*{name}*")) if runs.is_dir() else []
    assert len(made) == 1, (name, sorted(runs.iterdir()) if runs.is_dir() else "no runs/")
    assert (made[0] / "summary.json").is_file(), sorted(made[0].iterdir())
    assert (made[0] / "media" / "report.html").is_file(), sorted(made[0].iterdir())
    return made[0]


def test_the_wheel_installs_and_its_commands_run(installed, tmp_path):
    target, env = installed
    python, payoff = target / "bin" / "python", target / "bin" / "payoff"
    where = _run([str(python), "-c", "import payoff; print(payoff.__file__)"], tmp_path, env)
    assert where.startswith(str(target)) and str(ROOT) not in where, where
    assert payoff.read_text().startswith(f"#!{python}"), payoff.read_text()[:200]
    status = _run(
        [
            str(python),
            "-c",
            "from payoff.accel.native import native_status; print(native_status())",
        ],
        tmp_path,
        env,
    )
    if shutil.which("cc") or shutil.which("gcc"):  # the wheel built payoff's native kernels
        assert "native kernels (payoff/accel/_kernels.c)" in status, status

    recipes = _run([str(payoff), "recipes"], tmp_path, env)
    assert "cartpole-ppo" in recipes and "smollm2-grpo-arithmetic" in recipes, recipes[:2000]

    redteam = _run([str(payoff), "redteam", "boatrace", "budget=4000", "episodes=3"], tmp_path, env)
    assert "red team:" in redteam, redteam[-2000:]
    _run_folder(tmp_path / "runs", "redteam-boatrace")

    train = [str(payoff), "train", "cartpole-ppo", "total_steps=4096", "eval_every=0"]
    _run([*train, "final_eval_episodes=2"], tmp_path, env)
    trained = _run_folder(tmp_path / "runs", "cartpole-ppo")
    assert (trained / "metrics.jsonl").is_file(), sorted(trained.iterdir())
