"""DAgger (Ross, Gordon & Bagnell 2011): let the learner drive, ask the expert what it would do.

Round i = 0 .. rounds-1:
    1. drive with the mixture  pi_i = beta_i * expert + (1 - beta_i) * learner
       (a coin per env per step), beta_i = beta * beta_decay ** i;
    2. the expert labels every state visited: label_budget / rounds labels per round;
    3. aggregate: dataset D <- D + {(s, expert(s))};
    4. retrain the learner on all of D (warm-started, epochs_per_round passes).

Because the learner's own mistakes put it in the states it is then trained on, it learns to
recover from them: the errors that compound for behavior cloning stay bounded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from payoff.algos.shared.imitation import ImitationAlgorithm, ImitationConfig, fit_normalizer
from payoff.core.config import MAX_ENV_COPIES, in_range
from payoff.core.errors import ConfigError
from payoff.rollout.imitation import collect_mixture, make_envs
from payoff.rollout.vector import reset_envs


@dataclass
class DAggerConfig(ImitationConfig):
    """DAgger. Shared keys (env, expert, label_budget, loss, hidden, ...) are in
    payoff.algos.shared.imitation.ImitationConfig; DAgger's own:

    rounds: rollout-label-retrain rounds; each gets label_budget // rounds labels (the
        last one also the remainder).
    beta / beta_decay: probability that the expert (not the learner) drives a step in round
        i is beta * beta_decay ** i. beta=1, beta_decay=0 is the common choice: the expert
        drives round 0 (that round is behavior cloning), the learner drives afterwards.
        Trap: a slow decay spends labels on expert-driven states the learner never visits.
    epochs_per_round: passes over the aggregated dataset after each round.
    num_envs: envs stepped together while collecting (batched where the env supports it).
    eval_every: evaluate every this many rounds (0: only at the end).
    checkpoint_every: write checkpoints/latest.safetensors every this many rounds.
    """

    rounds: int = field(default=8, metadata=in_range(0, low_open=True))
    beta: float = field(default=1.0, metadata=in_range(0))
    beta_decay: float = field(default=0.0, metadata=in_range(0, 1))
    epochs_per_round: int = field(default=100, metadata=in_range(0, low_open=True))
    num_envs: int = field(default=4, metadata=in_range(1, MAX_ENV_COPIES))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=1, metadata=in_range(0, low_open=True))

    def validate(self) -> None:
        super().validate()
        if self.rounds > self.label_budget:
            raise ConfigError(
                f"rounds ({self.rounds}) exceeds label_budget ({self.label_budget}): every round needs labels"
            )
        if not 0.0 <= self.beta <= 1.0:  # a share here; core.config only knows beta >= 0
            raise ConfigError(f"config key 'beta' must be in [0, 1], got {self.beta}")


def beta_for_round(config: DAggerConfig, round_index: int) -> float:
    """The expert's share of the driving in round `round_index` (0-based)."""
    return config.beta * config.beta_decay**round_index


def labels_for_round(config: DAggerConfig, round_index: int) -> int:
    """Labels collected in round `round_index`: an equal share, the remainder in the last."""
    share = config.label_budget // config.rounds
    if round_index == config.rounds - 1:
        return config.label_budget - share * (config.rounds - 1)
    return share


class DAgger(ImitationAlgorithm):
    """Dataset Aggregation: learner-driven rollouts relabelled by the expert."""

    total_key = "rounds"
    extend_refusal = (
        "its label_budget is shared out over the rounds it planned, so more rounds would "
        "ask the expert for more labels than the budget"
    )
    loop_unit = "round"
    config: DAggerConfig
    saved = (*ImitationAlgorithm.saved, "rounds_log")

    def setup(self) -> None:
        super().setup()
        self.rounds_log: list[dict[str, Any]] = []

    @property
    def round(self) -> int:
        """Rounds done: the loop's step counter for DAgger."""
        return self.state.step

    def progress_step(self) -> int:
        return self.round

    def train_until(self, total: int) -> None:
        """Run rounds until `total` are done."""
        config = self.config
        self._envs = make_envs(config.env, config.num_envs)
        try:
            # Every round is logged, with its evaluation when due (log_training).
            super().train_until(total)
        finally:
            self._envs.close()

    def iterate(self) -> None:
        """One round: learner-driven rollouts labelled by the expert, then refit."""
        config = self.config
        beta = beta_for_round(config, self.round)
        started = time.time()
        # Each round starts from freshly seeded episodes, so a resumed run replays exactly.
        obs, _ = reset_envs(
            self._envs,
            config.seed + 100_000 + 1_000 * self.round,
            config.env.id,
            "DAgger's rollouts",
        )
        batch, _ = collect_mixture(
            self._envs,
            obs,
            self.act,
            self.labeller(),
            beta,
            labels_for_round(config, self.round),
            self.rng,
            config.env.id,
        )
        collect_seconds = time.time() - started
        self.add_data(batch.observations, batch.expert_actions)
        fit_normalizer(self.actor, self.data_obs)
        loss = float("nan")
        for _ in range(config.epochs_per_round):
            loss = self.fit_epoch()
        self.state.step += 1
        record = {
            "round": self.round,
            "labels": self.labels,
            "train/beta": beta,
            "train/loss": loss,
            "train/dataset_size": len(self.data_act),
            "rollout/episodes_finished": batch.episodes_finished,
            "rollout/expert_step_fraction": batch.expert_steps / max(len(batch.expert_actions), 1),
            "perf/collect_seconds": collect_seconds,
            "perf/round_seconds": time.time() - started,
        }
        if batch.episodes_finished:
            record["rollout/success_rate"] = batch.episodes_succeeded / batch.episodes_finished
            record["rollout/mean_return"] = float(np.mean(batch.returns))
        self.rounds_log.append({k: v for k, v in record.items() if not k.startswith("perf/")})
        self._record = record

    def progress_postfix(self) -> dict[str, Any]:
        return {"labels": self.labels}

    def log_training(self) -> None:
        """The round's record, with the evaluation merged in on evaluation rounds."""
        config = self.config
        record = dict(self._record)
        if config.eval_every and self.round % config.eval_every == 0:
            metrics = self.eval_metrics(config.eval_episodes, config.seed + 20_000 + self.round)
            self.evals.append({"round": self.round, **metrics})
            record.update(metrics)
        self.log(self.round, **record)

    def evaluate_now(self) -> None:
        """Evaluations are part of the round's record (log_training)."""

    def finish(self) -> None:
        self.finish_imitation(rounds=self.round, rounds_log=self.rounds_log)


ALGORITHM = DAgger
