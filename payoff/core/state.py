"""The saved form of the objects an algorithm holds, and how each is put back.

An algorithm names the attributes its checkpoint holds (`Algorithm.saved`); each is saved
by what it is: a torch module as its weights copied to the CPU, anything else with
`state_dict` (optimizers, schedulers, replay buffers, env runners) by that, a torch
generator by its state, a NumPy generator with the global random streams (`rng_state`), a
list of stateful objects item by item, and plain values (numbers, lists) as they are.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, TypeVar

import numpy as np
import torch

from payoff.core.seeding import rng_state, set_rng_state

T = TypeVar("T")


def cpu_state(module: Any) -> dict[str, torch.Tensor]:
    """A module's state_dict copied to the CPU: what a checkpoint holds, whatever the device."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def state_of(value: Any) -> Any:
    """The saved form of `value` (see the module docstring)."""
    if isinstance(value, torch.nn.Module):
        return cpu_state(value)
    if hasattr(value, "state_dict"):
        return value.state_dict()
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, np.random.Generator):
        return rng_state(value)
    if isinstance(value, list | tuple) and value and all(hasattr(v, "state_dict") for v in value):
        return [state_of(v) for v in value]
    return copy.deepcopy(value)


def restore(current: Any, saved: Any, name: str) -> Any:
    """Put `saved` back into the object `current` (in place where it has state), returning
    what the attribute should hold. A stateful object the checkpoint lacks is a ValueError."""
    stateful = hasattr(current, "load_state_dict") or isinstance(
        current, torch.Generator | np.random.Generator
    )
    if stateful and saved is None:
        raise ValueError(f"the checkpoint has no {name!r}, but this config needs one")
    if isinstance(current, torch.nn.Module) and isinstance(saved, dict):
        check_dtypes(current, saved, name)
    if hasattr(current, "load_state_dict"):
        current.load_state_dict(saved)
    elif isinstance(current, torch.Generator):
        current.set_state(saved)
    elif isinstance(current, np.random.Generator):
        set_rng_state(saved, current)
    elif (
        isinstance(current, list)
        and current
        and all(hasattr(v, "load_state_dict") for v in current)
    ):
        if len(saved) != len(current):
            raise ValueError(
                f"the checkpoint holds {len(saved)} {name}, this config {len(current)}"
            )
        for item, state in zip(current, saved, strict=True):
            item.load_state_dict(state)
    elif isinstance(current, bool | int | float):
        return type(current)(saved)
    elif isinstance(current, np.ndarray):
        return np.asarray(saved)
    else:
        return saved
    return current


def check_dtypes(module: torch.nn.Module, saved: dict[str, Any], name: str) -> None:
    """ValueError naming the first tensor of `saved` whose dtype is not the module's own:
    load_state_dict would cast it in silence (int64 weights truncated to whole numbers)."""
    own = module.state_dict()
    for key, value in saved.items():
        mine = own.get(key)
        tensors = isinstance(value, torch.Tensor) and isinstance(mine, torch.Tensor)
        if tensors and value.dtype != mine.dtype:
            raise ValueError(
                f"the checkpoint's {name}.{key} is {value.dtype}, but the model holds "
                f"{mine.dtype} there: the file is damaged or was not written by payoff"
            )


def count_values(tree: Any) -> int:
    """How many elements the tensors and arrays in a loaded tree (dicts, lists, tuples) hold."""
    if isinstance(tree, torch.Tensor):
        return tree.numel()
    if isinstance(tree, np.ndarray):
        return int(tree.size)
    if isinstance(tree, dict):
        return sum(count_values(v) for v in tree.values())
    if isinstance(tree, list | tuple):
        return sum(count_values(v) for v in tree)
    return 0


def tensors_to(batch: T, device: torch.device | str) -> T:
    """A copy of the dataclass `batch` with every tensor field (and every tensor in a dict
    field) moved to `device`; other fields are shared."""

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    fields = dataclasses.fields(batch)  # type: ignore[arg-type]
    return dataclasses.replace(batch, **{f.name: move(getattr(batch, f.name)) for f in fields})  # type: ignore[type-var]
