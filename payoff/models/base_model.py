"""The model a language-model run starts from: a local folder, or payoff's tiny base model.

    model.path set    -> that Hugging Face folder (a .gguf file, or an installed model
                         package's name: its converted folder, payoff.models.gguf)
    model.path empty  -> the tiny Llama after SFT on the run's task (`BaseModelConfig`),
                         trained once and cached under $PAYOFF_CACHE (payoff.core.cache)

Training the base model is an SFT run, which lives with the algorithms; the trainers hand
`start_lm` the function that builds it (e.g. `payoff.algos.sft.build_base_model`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import torch

from payoff.core.cache import building_folder, publish_folder
from payoff.core.config import MAX_BATCH, MAX_SEED, in_range
from payoff.core.device import resolve_device
from payoff.core.seeding import seed_everything
from payoff.models.lm import ModelConfig, load_lm, save_lm
from payoff.models.tiny_lm import TinyLMConfig


@dataclass
class BaseModelConfig:
    """How to pretrain the tiny base model when an RL run is given no model.path.

    It is trained with SFT on the RL run's own task (same options), then cached under
    $PAYOFF_CACHE (default ~/.cache/payoff)/base-models/, keyed by these settings and the
    task, so later runs reuse it. Stop it early to leave RL room to improve: after `steps`,
    or, with `stop_at_accuracy`, as soon as the model answers that fraction of training-
    distribution problems (checked every `check_every` steps; `steps` is then the cap).
    task_options: merged over the task's options for pretraining only, e.g. to pretrain on
    a narrower distribution than the RL run draws from (python_examples' unseen_share: 0).
    """

    steps: int = field(default=300, metadata=in_range(0, low_open=True))
    batch_size: int = field(default=128, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    loss_on: Literal["completion", "all"] = "completion"
    answer_noise: float = field(default=0.0, metadata=in_range(0, 1, high_open=True))
    stop_at_accuracy: float | None = field(default=None, metadata=in_range(0, 1))
    check_every: int = field(default=25, metadata=in_range(0, low_open=True))
    seed: int = field(default=0, metadata=in_range(0, MAX_SEED))
    task_options: dict[str, Any] = field(default_factory=dict)
    tiny: TinyLMConfig = field(default_factory=TinyLMConfig)


def resolve_model(model: ModelConfig, build_base: Callable[[], Path] | None) -> ModelConfig:
    """`model` when it names a folder (or there is no base to build); else `model` pointed at
    the folder `build_base()` returns, building the base model or finding it in the cache."""
    if model.path or build_base is None:
        return model
    return dataclasses.replace(model, path=str(build_base()))


def save_cached_model(
    model: Any, tokenizer: Any, path: Path, notes: dict[str, Any] | None = None
) -> Path:
    """Save a built model as the cache folder `path` (written aside, then renamed into place).

    notes: written next to it as payoff_base.json (how it was made, how well it did).
    """
    built = building_folder(path)
    save_lm(model, tokenizer, built)
    if notes is not None:
        (built / "payoff_base.json").write_text(json.dumps(notes))
    return publish_folder(built, path)


def set_threads(threads: int) -> None:
    """torch's CPU threads; 0 leaves torch's default. 1 is fastest for a small model on a
    shared or 2-core machine (more threads fight over the cores)."""
    if threads > 0:
        torch.set_num_threads(threads)


class LMStart(NamedTuple):
    """What a language-model trainer starts from."""

    model_config: ModelConfig  # with the resolved path ('' only for a fresh tiny model)
    rng: np.random.Generator  # the trainer's own draws
    model: Any
    tokenizer: Any
    device: torch.device  # where the model is


def start_lm(
    model: ModelConfig,
    seed: int,
    threads: int,
    build_base: Callable[[], Path] | None = None,
    device: str = "cpu",
) -> LMStart:
    """Threads, the device, the model's folder, the seeded random streams, then the model
    and tokenizer (on the device: auto | cpu | cuda | cuda:N | mps, see payoff.core.device).

    The order is the point: building the base model is itself a seeded training run, so
    every stream is seeded after it, and a run draws the same numbers whether its base
    model was just built or found in the cache. The device is resolved first, so a device
    that is not there stops the run before any base model is built.
    """
    set_threads(threads)
    where = resolve_device(device)
    model = resolve_model(model, build_base)
    rng = seed_everything(seed)
    language_model, tokenizer = load_lm(model, seed=seed, device=where)
    return LMStart(model, rng, language_model, tokenizer, where)
