"""payoff as a user installs it: the wheel built from this tree, in a fresh virtual environment.

An editable install reads every file from the source tree, so a data file missing from the
wheel (the red-team specs were, until 2026-12-08) passes every other test. Here the wheel is
built, installed with `--no-deps` into a new venv that borrows the project venv's packages
(torch and the rest: nothing is downloaded), and three commands run from a folder outside
the repository: `payoff recipes`, `payoff redteam boatrace` and a short `payoff train`.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
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


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv holding payoff's wheel; its python, and an environment that keeps the
    source tree off sys.path."""
    base = tmp_path_factory.mktemp("packaging")
    wheels = base / "wheels"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
    except ImportError as err:  # pragma: no cover - the dev install has both
        pytest.skip(f"cannot build a wheel here: {err}")
    # A copy of the files git tracks (and untracked ones it does not ignore): a build folder
    # left in the tree by an earlier build would carry files the package data leaves out.
    source = base / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        cwd=base,
        env=env,
        timeout=600,
    )
    (built,) = wheels.glob("payoff-*.whl")
    target = base / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The project venv's packages, appended after the new venv's own: a plain path line, so
    # the editable install's finder there is not run and `import payoff` finds the wheel.
    borrowed = [p for p in site.getsitepackages() if Path(p).is_dir()]
    borrowed += [sysconfig.get_paths()["purelib"]]
    Path(purelib, "_borrowed.pth").write_text("\n".join(dict.fromkeys(borrowed)) + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            purelib,
            str(built),
        ],
        cwd=base,
        env=env,
    )
    return python, env


def test_the_wheel_installs_and_its_commands_run(installed, tmp_path):
    python, env = installed
    where = _run([str(python), "-c", "import payoff; print(payoff.__file__)"], tmp_path, env)
    assert str(python.parents[1]) in where and str(ROOT) not in where, where
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
    cli = [str(python), "-m", "payoff.cli"]
    recipes = _run([*cli, "recipes"], tmp_path, env)
    assert "cartpole-ppo" in recipes and "smollm2-grpo-arithmetic" in recipes
    redteam = _run(
        [*cli, "redteam", "boatrace", "budget=4000", "--out", str(tmp_path / "runs")], tmp_path, env
    )
    assert "boatrace" in redteam.lower()
    _run(
        [
            *cli,
            "train",
            "cartpole-ppo",
            "total_steps=4096",
            "eval_every=0",
            "final_eval_episodes=2",
            "--out",
            str(tmp_path / "runs"),
        ],
        tmp_path,
        env,
    )
    runs = list((tmp_path / "runs").glob("*cartpole-ppo*"))
    assert runs, list((tmp_path / "runs").iterdir())
    assert (runs[0] / "media" / "report.html").is_file()
    assert (runs[0] / "metrics.jsonl").is_file()
