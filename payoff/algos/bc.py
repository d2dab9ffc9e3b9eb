"""Behavior cloning: supervised learning of the expert's action from the expert's own states.

    1. the expert drives; record label_budget (state, expert action) pairs
       (or load them: `demonstrations: path/to/minari-dataset`);
    2. fit the actor to them for `epochs` passes (payoff.algos.shared.imitation.imitation_loss).

The catch (Ross & Bagnell 2010): the learner is trained only on states the expert visits.
Its own small mistakes take it to states the expert never showed, where its mistakes are
larger: errors compound over an episode (O(T^2) instead of O(T)). See DAgger for the fix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from payoff.algos.shared.imitation import ImitationAlgorithm, ImitationConfig, fit_normalizer
from payoff.core.config import absolute_path, in_range
from payoff.core.errors import DataError
from payoff.rollout import demonstrations


@dataclass
class BCConfig(ImitationConfig):
    """Behavior cloning. Shared keys (env, expert, label_budget, loss, hidden, ...) are in
    payoff.algos.shared.imitation.ImitationConfig; BC's own:

    epochs: passes over the demonstrations.
    demonstrations: a Minari dataset directory to learn from instead of recording the
        expert (its env id and spaces must match env; label_budget caps how many
        transitions are used).
    eval_every: evaluate every this many epochs (0: none during training; the default in
        Python, 50 for `payoff train` runs).
    checkpoint_every: write checkpoints/latest.safetensors every this many epochs.
    """

    epochs: int = field(default=200, metadata=in_range(0, low_open=True))
    demonstrations: str | None = None
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=50, metadata=in_range(0, low_open=True))

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 50}  # payoff train runs

    def __post_init__(self) -> None:
        super().__post_init__()
        self.demonstrations = absolute_path(self.demonstrations)  # saved absolute


class BC(ImitationAlgorithm):
    """Behavior cloning from expert demonstrations."""

    total_key = "epochs"
    loop_unit = "epoch"
    config: BCConfig
    saved = (*ImitationAlgorithm.saved, "demo_return")

    def setup(self) -> None:
        super().setup()
        self.demo_return: float | None = None
        self._loss, self._epoch_seconds = float("nan"), 0.0

    @property
    def epoch(self) -> int:
        """Epochs fitted: the loop's step counter for behavior cloning."""
        return self.state.step

    def progress_step(self) -> int:
        return self.epoch

    def needs_expert(self) -> bool:
        return not self.config.demonstrations  # recorded ones need no one to label them

    def gather(self) -> None:
        """Record (or load) the demonstrations, once."""
        config = self.config
        if config.demonstrations:
            demos = demonstrations.load(config.demonstrations, env_id=config.env.id)
            demonstrations.check_spaces(
                demos, self.observation_space, self.action_space, config.env.id
            )
            observations, actions = demos.observations, demos.actions
            observations, actions = (
                observations[: config.label_budget],
                actions[: config.label_budget],
            )
            for what, values in (("observations", observations), ("actions", actions)):
                if not len(values):  # (no demonstrations: said where they are used)
                    continue
                flat = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
                bad = ~np.isfinite(flat).all(1)
                if bad.any():
                    raise DataError(
                        f"demonstrations {config.demonstrations!r}: {int(bad.sum())} of "
                        f"{len(values)} {what} are NaN or inf (the first at step "
                        f"{int(np.flatnonzero(bad)[0])}); fix or drop them"
                    )
        else:
            demos = demonstrations.record(
                config.env, self.labeller(), steps=config.label_budget, seed=config.seed + 10_000
            )
            observations, actions = demos.observations, demos.actions
        if len(demos.episode_starts):
            self.demo_return = float(demos.episode_returns().mean())
        self.add_data(observations, actions)
        fit_normalizer(self.actor, self.data_obs)

    def train_until(self, total: int) -> None:
        """Fit for `total` epochs on the demonstrations."""
        if self.labels == 0:
            self.gather()
            self.log(
                0,
                labels=self.labels,
                **({"train/demo_return": self.demo_return} if self.demo_return is not None else {}),
            )
        super().train_until(total)

    def iterate(self) -> None:
        """One pass over the demonstrations."""
        started = time.time()
        self._loss = self.fit_epoch()
        self._epoch_seconds = time.time() - started
        self.state.step += 1

    def progress_postfix(self) -> dict[str, Any]:
        return {"loss": self._loss}

    def log_training(self) -> None:
        self.log(
            self.epoch,
            labels=self.labels,
            **{"train/loss": self._loss, "perf/epoch_seconds": self._epoch_seconds},
        )

    def evaluate_now(self) -> None:
        config = self.config
        metrics = self.eval_metrics(config.eval_episodes, config.seed + 20_000 + self.epoch)
        self.evals.append({"epoch": self.epoch, **metrics})
        self.log(self.epoch, labels=self.labels, **metrics)

    def finish(self) -> None:
        self.finish_imitation(epochs=self.epoch, demo_return=self.demo_return)


ALGORITHM = BC
