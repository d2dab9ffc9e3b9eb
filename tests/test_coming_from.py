"""docs/coming-from-sb3-trl.md and the README's first example: they run as written (an SB3 user's script with
`action, _ = model.predict(obs)` and a callback; a TRL user's Parquet DataFrame of
conversations into DPO), and its tables name every other library's key payoff renames or
refuses (payoff.core.config.OTHER_LIBRARIES), so the page and the messages agree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from payoff.core.config import OTHER_LIBRARIES

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "coming-from-sb3-trl.md"
TEXT = DOC.read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)
OPENING, SB3_SCRIPT, TRL_SCRIPT = (BLOCKS + ["", "", ""])[:3]


def _section(title: str) -> str:
    return TEXT.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_every_renamed_or_refused_key_is_in_its_librarys_table():
    tables = {"SB3": _section("From Stable-Baselines3"), "TRL": _section("From TRL")}
    missing = [
        f"{library} {key}"
        for key, (library, _) in OTHER_LIBRARIES.items()
        if f"`{key}" not in tables[library]
    ]
    assert not missing, f"keys the config refuses but the page does not list: {missing}"


def test_the_page_has_an_opening_example_and_one_per_library():
    assert len(BLOCKS) == 3
    assert "action, _ = agent.predict(observation)" in OPENING
    assert "action, _states = model.predict(obs" in SB3_SCRIPT
    assert "pd.read_parquet" in TRL_SCRIPT


def test_the_opening_example_runs(tmp_path):
    _run(OPENING + "assert action in (0, 1) and agent.num_timesteps >= 20_000\n", tmp_path)


def _run(block: str, tmp_path: Path) -> str:
    script = tmp_path / "example.py"
    script.write_text(block)
    env = {**os.environ, "PAYOFF_CACHE": str(tmp_path / "cache"), "PAYOFF_LOGGERS": "none"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_sb3_users_script_runs_and_its_callback_stops_training(tmp_path):
    out = _run(SB3_SCRIPT, tmp_path).splitlines()
    assert 4_096 <= int(out[0]) < 4_096 + 4 * 128  # stopped at the first log past 4,096
    assert out[-1].startswith("mean return ") and "over 5 episodes" in out[-1]
    assert (tmp_path / "ppo-cartpole.safetensors").exists()


@pytest.mark.slow
def test_the_trl_users_parquet_dataframe_trains_dpo(tmp_path):
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    out = _run(TRL_SCRIPT, tmp_path).splitlines()
    step, loss = out[0].split()
    assert step == "4" and float(loss) > 0
    assert len(out) == 2


def test_the_readmes_first_example_runs_as_an_sb3_user_reads_it(tmp_path):
    block = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    assert "action, _ = agent.predict(observation)" in block
    _run(block + "assert action in (0, 1) and agent.num_timesteps >= 50_000\n", tmp_path)
