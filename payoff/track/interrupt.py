"""Ctrl-C, SIGTERM and SIGHUP finish the current unit of work, write a checkpoint, and stop.

Job schedulers, containers and `kill` send SIGTERM; a closed terminal sends SIGHUP. Each is
treated as Ctrl-C: the loop finishes its step, checkpoints, and the CLI exits with the
shell's status for that signal (128 + its number: 130 for SIGINT, 143 for SIGTERM, 129 for
SIGHUP), so `payoff train --resume RUN` continues where it stopped. A second signal stops at
once (KeyboardInterrupt), for a loop stuck inside one long step.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: The signals that ask a training loop to stop gracefully (SIGHUP does not exist on Windows).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

_last_signal: int | None = None


def exit_status(default: int = signal.SIGINT) -> int:
    """The shell's exit status for a run stopped by a signal: 128 + the signal's number."""
    return 128 + int(_last_signal if _last_signal is not None else default)


def ignore_ctrl_c_in_worker() -> None:
    """For a worker process of a training loop: Ctrl-C reaches the whole process group, and
    the main process finishes its iteration and stops the workers itself, so a worker must
    not die mid-task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def stop_signals_kept() -> Iterator[None]:
    """Within this context a library may install its own handlers for the stop signals; on
    leaving, the handlers that were there before are put back.

    `ray.init` takes SIGTERM for itself (its handler exits at once with status 15, and the
    C++ core worker it starts adds a crash handler that prints a stack trace), so a run that
    starts Ray inside its training loop would otherwise lose its checkpoint to a `kill`.
    Putting Python's handler back also replaces the C++ one (one sigaction per signal).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread handles signals, and only it may set them
        return
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


class GracefulInterrupt:
    """Within this context the first stop signal sets `requested`; a second one interrupts at once.

    `signal` holds the signal that was received. In a process forked inside the context
    (a subprocess env worker) the signals keep their default meaning, so that its parent
    can still terminate it.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        global _last_signal
        if os.getpid() != self._pid:  # a forked child: behave as if we were never installed
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        _last_signal = signum
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.signal = signum

    def __enter__(self) -> GracefulInterrupt:
        for signum in STOP_SIGNALS:
            try:
                previous = signal.getsignal(signum)
                if previous == signal.SIG_IGN:  # e.g. under `nohup`: the user chose to ignore it
                    continue
                signal.signal(signum, self._handler)
            except ValueError:  # not the main thread: leave signals alone
                break
            self._previous[signum] = signal.SIG_DFL if previous is None else previous
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
