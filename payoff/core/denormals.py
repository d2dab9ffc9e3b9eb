"""Denormal floats flushed to zero for a block of CPU work.

A float32 below 1.2e-38 is "denormal": many x86 CPUs handle it in microcode, many times
slower than a normal float. Small MLPs trained long can compute with many of them. The
measured case: pendulum-mbrl with 2,000 gradient steps per refit (fit_steps=2000) ended
with 1.8% of its dynamics ensemble's SiLU outputs denormal, and its planner ran several
times slower than with them flushed.

Flushing them (and reading denormal inputs as zero) moves each such value by less than
1.2e-38; only a later division by it or log of it would notice. `torch.set_flush_denormal`
has no getter, so `flushed_denormals` probes the mode first and restores it on exit.

The mode is per thread, and a thread started while it is on keeps it. The block covers
the calling thread, which is all of torch's CPU work at one thread (`threads=1`, the
default) and autograd's backward. At more threads, torch's pool threads started inside a
block flush for the rest of the process, and pool threads started earlier do not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def flushing_denormals() -> bool:
    """Whether this thread's CPU float mode flushes denormal results to zero now."""
    small = torch.full((1,), 1e-20, dtype=torch.float32, device="cpu")
    return bool((small * small).item() == 0.0)  # 1e-40: a denormal, or 0.0 when flushed


@contextmanager
def flushed_denormals() -> Iterator[None]:
    """Run the block with denormal floats flushed to zero, then restore the previous mode."""
    before = flushing_denormals()
    if before or not torch.set_flush_denormal(True):  # already on, or the CPU cannot
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
