"""Seeding and RNG state capture, so the same seed gives the same run and resume is exact."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> np.random.Generator:
    """Seed python, numpy and torch; return a numpy Generator for the caller's own draws."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def rng_state(generator: np.random.Generator | None = None) -> dict[str, Any]:
    """Everything needed to continue the random streams exactly where they are."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy_global": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if generator is not None:
        state["generator"] = generator.bit_generator.state
    return state


def set_rng_state(state: dict[str, Any], generator: np.random.Generator | None = None) -> None:
    """Restore what `rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy_global"])
    torch.set_rng_state(state["torch"])
    if generator is not None and "generator" in state:
        generator.bit_generator.state = state["generator"]
