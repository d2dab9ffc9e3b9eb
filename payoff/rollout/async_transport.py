"""What travels between a `ProcessSampler` and its sampling process (payoff.rollout.
async_generation): messages, weights and errors.

Messages both ways are payoff.track.checkpoint trees, one per `send_message`: plain data,
which cannot name code to run (never a pickle). Weights of one dtype travel through shared
memory instead, a version to a slot of a `WeightRing`, the message carrying only where they
are and their layout. An exception in the child comes back as an `ErrorReport` and is
raised here by `raise_report`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch

from payoff.core.errors import PayoffError, RunError
from payoff.track.checkpoint import dumps_state, loads_state


# ---- messages ------------------------------------------------------------------------------------
def send_message(connection: Connection, message: tuple[Any, ...]) -> None:
    """`message` down the pipe as one checkpoint tree."""
    connection.send_bytes(dumps_state(message))


def receive_message(connection: Connection) -> Any:
    """The next message from the pipe (blocks until one comes)."""
    return loads_state(connection.recv_bytes(), "a message from the sampling process's pipe")


# ---- errors --------------------------------------------------------------------------------------
# What the child reports of an exception: the type's name, whether it is a payoff error
# (raised here as itself, looked up by name among payoff's error classes), the message, and
# the child's traceback. Plain data: messages both ways are payoff.track.checkpoint trees,
# which cannot name code to run (never a pickle).
ErrorReport = tuple[str, bool, str, str]


class _ChildTraceback(Exception):
    """The traceback of an exception raised in the child (the cause of the one raised here)."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0])


def raise_report(report: ErrorReport) -> None:
    """Raise the child's exception here: payoff errors as themselves, others as RunError."""
    name, is_payoff, message, trace = report
    cause = _ChildTraceback(trace)
    payoff_class = _payoff_error_class(name) if is_payoff else None
    if payoff_class is not None:
        raise payoff_class(message) from cause
    raise RunError(f"sampling in the child process failed: {name}: {message}") from cause


def _payoff_error_class(name: str) -> type[PayoffError] | None:
    """The payoff error class called `name` (PayoffError and its subclasses), if one is."""
    found: list[type[PayoffError]] = [PayoffError]
    for cls in found:
        if cls.__name__ == name:
            return cls
        found.extend(cls.__subclasses__())
    return None


def error_report(error: BaseException) -> ErrorReport:
    """What the child sends back of `error`, the exception being handled."""
    is_payoff = isinstance(error, PayoffError)
    return type(error).__name__, is_payoff, str(error), traceback.format_exc()


# ---- weights, through shared memory --------------------------------------------------------------
FLAT_DTYPES = {
    "torch.float32": torch.float32,
    "torch.bfloat16": torch.bfloat16,
    "torch.float16": torch.float16,
}


class WeightRing:
    """Flat weights versions in `SLOTS` reusable slots of one file in shared memory, mapped
    by the learner and the child alike: a push is one copy of the weights into a slot (no
    file to create, write, read and delete each step), and the child copies the slot into
    its model.

    Version v goes to slot v % SLOTS. The file starts with one int64 per slot: the last
    version the child has loaded from it. Before overwriting a slot the learner waits until
    the child has loaded the version it last put there; with a few slots and at most
    max_staleness batches ahead, that wait is for a child far behind, and it ends with an
    error if the child is gone.
    """

    SLOTS = 4
    HEADER = 64  # bytes: SLOTS int64 counters, padded so every slot stays aligned
    PATIENCE = 300.0  # seconds to wait for the child to read a slot before giving up

    def __init__(self, nbytes: int, version: int):
        self.nbytes = nbytes
        self.shared = SharedFile(f"weights-ring-{version}", self.HEADER + self.SLOTS * nbytes)
        self.path = self.shared.path  # what the child opens
        self.memory = map_shared(self.path)
        self.loaded = self.memory[: self.HEADER].view(torch.int64)[: self.SLOTS]
        self.loaded.fill_(-1)
        self.written = [-1] * self.SLOTS  # the version the learner last put in each slot

    def write(self, version: int, tensors: Any, check_alive: Callable[[], None]) -> int:
        """Copy `tensors` (one dtype) into version's slot, once the child is done with it."""
        slot = version % self.SLOTS
        since = time.perf_counter()
        while int(self.loaded[slot]) < self.written[slot]:
            check_alive()
            if time.perf_counter() - since > self.PATIENCE:
                raise RunError(
                    f"the sampling process has not read weights version {self.written[slot]} "
                    f"in {self.PATIENCE:.0f} s, so its slot cannot take version {version}; "
                    f"is it stuck? close() the sampler and submit again to start a new one"
                )
            time.sleep(0.0005)
        values = list(tensors)
        target = ring_slot(self.memory, slot, self.nbytes, values[0].dtype)
        torch.cat([t.reshape(-1) for t in values], out=target)
        self.written[slot] = version
        return slot

    def close(self) -> None:
        """Give the memory back (a child that mapped it keeps it until it exits)."""
        self.shared.close()


class SharedFile:
    """A file of `size` zero bytes in memory that the sampling process, this process's child,
    can open by `path`, and that nothing outlives.

    Linux: a memfd (anonymous shared memory, counted like /dev/shm but with no name in
    it); the child opens it as /proc/<this pid>/fd/<fd>. The kernel frees it once this
    process has closed the fd (or ended, SIGKILL included) and every mapping is gone, so a
    killed run leaves nothing behind. Elsewhere (no memfd or no /proc): a file in a private
    temporary folder (0700), removed by close() or at the interpreter's exit.
    """

    def __init__(self, name: str, size: int):
        self.fd: int | None = None
        self.folder: str | None = None
        if hasattr(os, "memfd_create"):
            try:
                fd = os.memfd_create(f"payoff-{name}")  # close-on-exec: no other child gets it
            except OSError:  # kernel without memfd, or a seccomp filter that refuses it
                fd = None
            if fd is not None:
                path = f"/proc/{os.getpid()}/fd/{fd}"
                if os.path.exists(path):
                    os.ftruncate(fd, size)
                    self.fd, self.path = fd, path
                    return
                os.close(fd)
        self.folder = tempfile.mkdtemp(prefix="payoff-weights-")
        self.path = os.path.join(self.folder, f"{name}.bin")
        with open(self.path, "wb") as file:
            file.truncate(size)
        self._remover = weakref.finalize(self, shutil.rmtree, self.folder, True)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.folder is not None:
            self._remover()


def map_shared(path: str) -> torch.Tensor:
    """A whole file as a uint8 tensor over a shared mapping: writes reach every process
    that maps it."""
    return torch.from_file(path, shared=True, size=os.path.getsize(path), dtype=torch.uint8)


def ring_slot(memory: torch.Tensor, slot: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
    start = WeightRing.HEADER + slot * nbytes
    return memory[start : start + nbytes].view(dtype)


def unflatten(data: bytes, layout: Any, dtype: Any, what: str) -> dict[str, torch.Tensor]:
    """The named tensors of a flat weights buffer (`send_weights`), checked against its
    layout: a known dtype, and exactly as many values as the shapes hold."""
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(
        layout_dtype(layout, dtype, what)
    )
    return split_flat(flat, layout, what)


def layout_dtype(layout: Any, dtype: Any, what: str) -> torch.dtype:
    """The torch dtype a flat weights message names, once its layout is one we read."""
    if dtype not in FLAT_DTYPES or not isinstance(layout, list):
        raise RunError(f"{what}: unknown weights layout (dtype {dtype!r})")
    return FLAT_DTYPES[dtype]


def split_flat(flat: torch.Tensor, layout: Any, what: str) -> dict[str, torch.Tensor]:
    """`layout`'s named tensors as views of `flat` (exactly as many values as it names)."""
    sizes = [int(torch.Size(shape).numel()) for _, shape in layout]
    if sum(sizes) != flat.numel():
        raise RunError(f"{what} holds {flat.numel()} values, but its layout names {sum(sizes)}")
    parts = flat.split(sizes)
    return {name: part.view(shape) for (name, shape), part in zip(layout, parts, strict=True)}
