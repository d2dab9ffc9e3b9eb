"""payoff's on-disk cache: what a run builds once and later runs reuse (base models, documents).

Everything lives under $PAYOFF_CACHE (default ~/.cache/payoff), one folder per kind of thing
and per distinct recipe for it, so a changed setting builds a new folder instead of reusing a
stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: builds are not serialized
    fcntl = None  # type: ignore[assignment]


def cache_root() -> Path:
    """$PAYOFF_CACHE, or ~/.cache/payoff."""
    return Path(os.environ.get("PAYOFF_CACHE", "~/.cache/payoff")).expanduser()


def cache_folder(kind: str, name: str, key: Any) -> Path:
    """cache_root()/kind/<name>-<12 hex digits of the SHA-1 of `key` as sorted JSON>; values
    JSON has no form for (a Path in a task's options) count by their str()."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return cache_root() / kind / f"{name}-{digest}"


def building_folder(path: Path) -> Path:
    """Where this process writes `path` before `publish_folder` moves it into place."""
    return path.with_name(path.name + f".tmp{os.getpid()}")


def publish_folder(built: Path, path: Path) -> Path:
    """Rename the finished folder `built` to `path`, so readers never see half of it.

    When another process finished `path` first, theirs is kept and `built` removed.
    """
    if not path.exists():
        try:
            built.rename(path)
            return path
        except OSError:  # another process renamed its copy into place between the two lines
            if not path.exists():
                raise
    shutil.rmtree(built, ignore_errors=True)
    return path


@contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Hold the build lock of cache folder `path` while building it.

    Two processes that need the same missing folder at once (two runs started together on
    a fresh machine, two test workers) would both spend minutes building it; with the lock
    the second waits, then finds the first one's folder (check for it again inside). The
    lock is an flock on `<path>.lock`: the system releases it when its holder exits, so a
    crashed build never blocks the next one. Without fcntl (Windows) nothing is serialized.
    """
    if fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"payoff: waiting for another process that is building {path}", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---- what payoff wrote here ---------------------------------------------------------------
def _written_ledger() -> Path:
    return cache_root() / "written-here.txt"


_NOTED: set[str] = set()  # ledger lines this process has written already


def config_digest(config: Any) -> str | None:
    """A short fingerprint of a config as data (a dict read from or written to a checkpoint);
    None for one JSON cannot order (keys of mixed types), which is then never trusted."""
    try:
        text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def remember_written(path: str | Path, config: Any) -> None:
    """Note that payoff wrote `path` (a run folder, a saved file) holding `config` on this
    machine for this user, so loading that config from there later may import the code it
    names (core.imports). One line per path and config; a failure to note it only costs a
    --trust-code later."""
    digest = config_digest(config)
    line = f"{os.path.realpath(path)}\t{digest}"
    if digest is None or line in _NOTED:
        return
    try:
        ledger = _written_ledger()
        ledger.parent.mkdir(parents=True, exist_ok=True)
        with open(ledger, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        _NOTED.add(line)
    except OSError:
        pass


def written_here(path: str | Path, config: Any) -> bool:
    """Whether payoff wrote `config` to `path`, or to a folder that holds it, on this machine
    for this user. Both must match: a file copied over one that payoff wrote, or a
    downloaded run unpacked where one of yours used to be, carries another config."""
    try:
        noted = set(_written_ledger().read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        return False
    real = Path(os.path.realpath(path))
    digest = config_digest(config)
    return digest is not None and any(f"{p}\t{digest}" in noted for p in (real, *real.parents))
