"""Ctrl-C finishes the current unit of work, writes a checkpoint, and stops cleanly."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any


class GracefulInterrupt:
    """Within this context the first SIGINT sets `requested`; a second one interrupts at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> GracefulInterrupt:
        try:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # not the main thread: leave signals alone
            self._previous = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
