"""Atomic file writes: write a temporary file next to the target, then rename it into place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def atomic_write(
    path: str | Path, write: Callable[[IO[Any]], object], binary: bool = False
) -> None:
    """Call `write(file)` on a temp file in the target's folder, then atomically rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with writing_to(path), os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; runs are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@contextmanager
def writing_to(path: str | Path) -> Iterator[None]:
    """Give an OSError that names no file (a full disk, a quota: "No space left on device")
    `path` as its file name, so that its one-line message says which file was being written."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise type(err)(err.errno, err.strerror or str(err), str(path)) from err


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that readers see either the old file or the whole new one."""
    atomic_write(path, lambda f: f.write(text))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    atomic_write(path, lambda f: f.write(data), binary=True)
