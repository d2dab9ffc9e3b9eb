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
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """$PAYOFF_CACHE, or ~/.cache/payoff."""
    return Path(os.environ.get("PAYOFF_CACHE", "~/.cache/payoff")).expanduser()


def cache_folder(kind: str, name: str, key: Any) -> Path:
    """cache_root()/kind/<name>-<12 hex digits of the SHA-1 of `key` as sorted JSON>."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
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
