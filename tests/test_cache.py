"""The on-disk cache: a folder is built once, even when two processes need it at once."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from payoff.core.cache import build_lock, cache_folder

pytest.importorskip("fcntl", reason="build locks need fcntl (POSIX)")

HOLDER = """
import sys, time
from pathlib import Path
from payoff.core.cache import build_lock
path = Path(sys.argv[1])
with build_lock(path):
    print("locked", flush=True)
    time.sleep(1.5)
    path.mkdir()
    (path / "config.json").write_text("{}")
"""


def test_a_second_builder_waits_for_the_first_and_finds_its_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path))
    path = cache_folder("base-models", "addition", {"steps": 1})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.perf_counter()
        with build_lock(path):
            waited = time.perf_counter() - started
            assert (path / "config.json").is_file()  # built by the holder: nothing to do
    finally:
        holder.wait(timeout=30)
    assert waited > 0.5, waited
    assert f"waiting for another process that is building {path}" in capsys.readouterr().err


def test_a_killed_builder_leaves_no_lock_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path))
    path = cache_folder("agent-models", "calculator", {"steps": 2})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    holder.kill()  # SIGKILL in the middle of its build: no finally runs
    holder.wait(timeout=30)
    started = time.perf_counter()
    with build_lock(path):
        assert time.perf_counter() - started < 0.5
    assert not path.exists()  # it never finished: the next builder builds
