"""Where tensors live: the `device` key every trainer shares.

    device: auto | cpu | cuda | cuda:N | mps

'auto' picks CUDA when torch sees a GPU, else Apple's MPS when present, else the CPU. A
device that is asked for by name but absent is one ConfigError saying what torch sees, so
a run never falls back to the CPU silently.
"""

from __future__ import annotations

import re

import torch

from payoff.core.errors import ConfigError

DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device_name(name: str) -> None:
    """A ConfigError naming the valid spellings when `name` is not one of them."""
    if not DEVICE_PATTERN.match(name):
        raise ConfigError(
            f"config key 'device' must be auto, cpu, cuda, cuda:N or mps, got {name!r}"
        )


def available_devices() -> list[str]:
    """What torch can use on this machine, e.g. ['cpu', 'cuda:0', 'cuda:1']."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def resolve_device(name: str = "auto") -> torch.device:
    """The torch.device for a config's `device` value; see the module docstring."""
    check_device_name(name)
    found = available_devices()
    if name == "auto":
        accelerators = [d for d in found if d != "cpu"]
        return torch.device(accelerators[0] if accelerators else "cpu")
    wanted = "cuda:0" if name == "cuda" else name
    if wanted not in found:
        raise ConfigError(
            f"device {name!r} is not available on this machine (torch sees: {', '.join(found)}); "
            f"use device=auto or device=cpu"
        )
    return torch.device(wanted)
