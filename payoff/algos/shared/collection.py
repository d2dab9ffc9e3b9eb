"""What an RL step on a language model samples and what it knows about it: groups of
completions of the task's prompts, their rewards and the task verifier's verdict, and the
integrity checks on all of it (canaries, paid-but-wrong suspects, quarantine, judge
addressing). GRPO's collection; a trainer with a task, a policy and rewards calls it.

    collection = GroupCollection(trainer, CollectionSettings.of(config), sampler, rewards,
                                 canaries=config.canaries, inoculation=config.inoculation,
                                 seed=config.seed)
    batch, metrics = collection.collect()   # Batch: each problem's G completions adjacent

Sampling runs in step with the trainer (its generator) or, with `sample_ahead` > 0, up to
that many steps ahead on an asynchronous sampler, whose seeds come from a stream of their
own (`ahead_generator`, saved with the checkpoint) so that the trainer's generator is not
raced. With dynamic sampling (DAPO) groups whose rewards are all equal are dropped and more
prompts sampled; the checks still see every completion sampled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from payoff.algos.shared.group import flat_groups, overlong_penalty
from payoff.algos.shared.lm import columns_of
from payoff.monitor.detectors import Alarm, Monitor
from payoff.monitor.integrity import (
    Canaries,
    CanaryConfig,
    Planted,
    inoculated,
    inoculation_line,
    lm_monitors,
)
from payoff.monitor.judge_addressing import JudgeAddressing, is_model_scored
from payoff.rewards.base import RewardMix, unscored_rows
from payoff.rollout.generation import (
    Generation,
    LocalSampler,
    Sampler,
    SamplingConfig,
    concat_generations,
)
from payoff.rollout.ray_generation import RaySampler

if TYPE_CHECKING:
    from payoff.envs.tasks import Row, Task
    from payoff.models.lm import ModelConfig
    from payoff.rollout.async_generation import Pending
    from payoff.track.run import Run


class Trainer(Protocol):
    """What the collection reads of the trainer it serves (an LMAlgorithm has all of it):
    its task, generators and step are read at each call, so they may change under it."""

    task: Task
    rng: np.random.Generator  # problems and canaries
    generator: torch.Generator  # sampling in step with the trainer
    verifier: RewardMix | None  # the task's correctness check; None for prompt-only rows
    tokenizer: Any
    step: int
    run: Run | None
    suspects: deque[dict[str, Any]]  # alarm evidence: paid-but-wrong samples, canary passes

    def prompt_text(self, row: Row) -> str: ...


@dataclass(frozen=True)
class CollectionSettings:
    """prompts_per_step problems of group_size completions each, sampled with `sampling`;
    overlong_buffer / overlong_penalty: DAPO's soft length penalty (0: off); dynamic
    sampling and its batch limit; sample_ahead: batches an asynchronous sampler may run
    ahead of the trainer (0: in step)."""

    prompts_per_step: int
    group_size: int
    sampling: SamplingConfig
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    dynamic_sampling: bool = False
    dynamic_sampling_max_batches: int = 4
    sample_ahead: int = 0

    @classmethod
    def of(cls, config: Any) -> CollectionSettings:
        """The settings of a config with GRPO's keys (payoff.algos.grpo.GRPOConfig)."""
        return cls(
            prompts_per_step=config.prompts_per_step,
            group_size=config.group_size,
            sampling=SamplingConfig(
                config.temperature, config.top_p, config.max_new_tokens, config.stop
            ),
            overlong_buffer=config.overlong_buffer,
            overlong_penalty=config.overlong_penalty,
            dynamic_sampling=config.dynamic_sampling,
            dynamic_sampling_max_batches=config.dynamic_sampling_max_batches,
            sample_ahead=config.max_staleness if config.async_generation else 0,
        )


@dataclass
class Batch:
    """Completions of a step with what was computed about them, one entry per completion
    (each problem's group of G adjacent)."""

    rows: list[dict[str, Any]]
    generation: Generation
    paid: list[float]  # the reward functions' weighted sum: what the monitors compare
    totals: list[float]  # paid plus the overlong penalty: what the advantages use
    scores: dict[str, list[float | None]]  # each reward function alone
    correct: list[float]  # the task's verifier (what the reward should mean)
    staleness: int  # policy versions between the sampling weights and the trained ones

    def take(self, index: list[int]) -> Batch:
        """The completions at `index`, in that order."""
        return Batch(
            [self.rows[i] for i in index],
            self.generation.select(index),
            [self.paid[i] for i in index],
            [self.totals[i] for i in index],
            {k: [v[i] for i in index] for k, v in self.scores.items()},
            [self.correct[i] for i in index],
            self.staleness,
        )

    @staticmethod
    def join(parts: list[Batch], pad_id: int) -> Batch:
        """One batch of the parts' completions, in order."""
        if len(parts) == 1:
            return parts[0]
        return Batch(
            [r for b in parts for r in b.rows],
            concat_generations([b.generation for b in parts], pad_id),
            [p for b in parts for p in b.paid],
            [t for b in parts for t in b.totals],
            {k: [v for b in parts for v in b.scores[k]] for k in parts[0].scores},
            [c for b in parts for c in b.correct],
            max(b.staleness for b in parts),
        )


def group_sampler(config: Any, model_config: ModelConfig, model: Any, tokenizer: Any) -> Sampler:
    """Where a config with GRPO's keys samples: on Ray actors with a model copy each
    (backend ray), in a second process with its own copy (async_generation), else here."""
    if config.backend == "ray":
        return RaySampler(
            config.ray,
            model_config,
            model,
            tokenizer.pad_token_id,
            seed=config.seed,
            group_size=config.group_size,
        )
    if config.async_generation:
        from payoff.rollout.async_generation import ProcessSampler

        return ProcessSampler(
            model_config,
            model,
            tokenizer.pad_token_id,
            seed=config.seed,
            threads=config.sampler_threads or config.threads,
        )
    return LocalSampler(model, tokenizer)


def _group_rows(groups: list[int], group_size: int) -> list[int]:
    """The completions of the groups `groups`, in order."""
    return [k * group_size + j for k in groups for j in range(group_size)]


class GroupCollection:
    """Samples, scores and checks each step's groups of completions for `trainer`."""

    def __init__(
        self,
        trainer: Trainer,
        settings: CollectionSettings,
        sampler: Sampler,
        rewards: RewardMix,
        canaries: CanaryConfig,
        inoculation: str = "",
        seed: int = 0,
    ):
        self.trainer = trainer
        self.settings = settings
        self.sampler = sampler
        self.rewards = rewards
        # A judge or reward model can be talked to: watch for completions that try.
        self.judge_addressing = (
            JudgeAddressing(scorer=rewards) if is_model_scored(rewards) else None
        )
        self.canaries = Canaries(canaries, trainer.task)  # the task's own contradict
        self.inoculation = inoculation_line(inoculation)
        self.quarantined: set[tuple[str, str]] = set()  # (prompt, completion) out of the loss
        # Batches sampled ahead: (rows, planted, in-flight generation, the step it was
        # submitted at), and the seeds' own stream.
        self.pending: deque[tuple[list[dict[str, Any]], Planted, Pending, int]] = deque()
        self.ahead_generator = torch.Generator().manual_seed(seed + 1)

    # ---- the rewards and what watches them --------------------------------------------------
    def rewards_are_the_verifier(self) -> bool:
        """True when the rewards are the task's verifier alone: the same function with the
        same options, weight 1, timeout and error score, so that the reward's total is the
        verifier's verdict on every completion. True too for prompt-only rows, which have no
        verifier: the rewards are the only judge, with no truth to hold them to."""
        verifier = self.trainer.verifier
        if verifier is None:
            return True
        specs, check = self.rewards.specs, verifier.specs[0]
        return len(specs) == 1 and (
            specs[0].name,
            specs[0].options,
            specs[0].weight,
            specs[0].on_error,
            specs[0].timeout,
        ) == (check.name, check.options, 1.0, check.on_error, check.timeout)

    def monitors(self) -> list[Monitor]:
        """Integrity checks (payoff.monitor.integrity): proxy vs the task's verifier on the
        same samples when the rewards are not that verifier, canaries, blocked operations of
        sandboxed code, judge addressing, length and truncation drift."""
        return lm_monitors(
            proxy="train/reward",
            truth=None if self.rewards_are_the_verifier() else "train/accuracy",
            code_rewards=[s.key for s in self.rewards.specs if s.name == "code"],
            canaries=self.canaries.config,
            model_scored=self.judge_addressing is not None,
        )

    def quarantine(self, alarm: Alarm) -> int:
        """Every suspect sample since the alarm's onset leaves the loss for good."""
        onset = int(alarm.evidence.get("since_step", alarm.step))
        suspects = self.trainer.suspects
        flagged = {(s["prompt"], s["completion"]) for s in suspects if s["step"] >= onset}
        self.quarantined |= flagged
        return len(flagged)

    def quarantined_rows(self, batch: Batch) -> list[int]:
        """The completions of `batch` that an alarm took out of the loss."""
        completions = batch.generation.completions
        return [
            i
            for i, row in enumerate(batch.rows)
            if (str(row["prompt"]), completions[i]) in self.quarantined
        ]

    # ---- sampling ---------------------------------------------------------------------------
    def draw(self, prompts_count: int) -> tuple[list[dict[str, Any]], Planted, list[str]]:
        """Problems for one generation batch (some replaced by canaries when `canaries.share`
        > 0): the rows (each problem's G adjacent), the planted batch, the model's prompts."""
        trainer = self.trainer
        problems = trainer.task.sample(trainer.rng, prompts_count)
        planted = self.canaries.plant(problems, trainer.rng)
        rows = [row for row in planted.rows for _ in range(self.settings.group_size)]
        # The model reads the prompt through its chat template (when on), after the
        # inoculation line (when set); rewards get the row's own prompt.
        prompts = [trainer.prompt_text(inoculated(r, self.inoculation)) for r in rows]
        return rows, planted, prompts

    def rollout(
        self, prompts_count: int | None = None, ahead: bool = True
    ) -> tuple[list[dict[str, Any]], Planted, Generation, int]:
        """Sample G completions for each of `prompts_count` problems (default
        prompts_per_step); returns the rows, the planted batch, the generation and its
        staleness (policy versions behind).

        Sampling ahead, the step's batch (`ahead`) was usually submitted one step earlier,
        before that step's update, and the next ones are submitted now, before this step's
        update: the sampler works while the trainer trains. Extra batches of dynamic
        sampling (`ahead=False`) are sampled at once, with the current weights.
        """
        settings = self.settings
        prompts_count = prompts_count or settings.prompts_per_step
        if not settings.sample_ahead or not ahead:
            # In step with the trainer, with its own generator (an async sampler's generate
            # is submit().result(): staleness 0 samples as synchronously).
            rows, planted, prompts = self.draw(prompts_count)
            generation = self.sampler.generate(prompts, settings.sampling, self.trainer.generator)
            return rows, planted, generation, 0
        if not self.pending:
            self.submit_ahead()
        rows, planted, pending, submitted = self.pending.popleft()
        generation = pending.result()
        while len(self.pending) < settings.sample_ahead:
            self.submit_ahead()  # sampled with the weights as they are now, before the update
        return rows, planted, generation, self.trainer.step - submitted

    def submit_ahead(self) -> None:
        """Send one step's batch to the sampler without waiting for it."""
        rows, planted, prompts = self.draw(self.settings.prompts_per_step)
        seed = int(torch.randint(2**62, (1,), generator=self.ahead_generator))
        pending = self.sampler.submit(prompts, self.settings.sampling, seed=seed)  # type: ignore[attr-defined]
        self.pending.append((rows, planted, pending, self.trainer.step))

    def drop_pending(self, wait: bool) -> None:
        """Forget the batches sampled ahead: after a rollback (the weights they came from
        are gone; `wait` for them, so that the sampler is free) or at the end (not waiting:
        closing the sampler discards them)."""
        for _, _, pending, _ in self.pending if wait else ():
            try:
                pending.result()
            except Exception:  # a dead sampler is reported by the next generate
                pass
        self.pending.clear()

    # ---- one step's batch -------------------------------------------------------------------
    def collect(self) -> tuple[Batch, dict[str, float]]:
        """Rollout and reward one step's batch; with dynamic sampling, keep only groups
        whose rewards differ, sampling more until prompts_per_step of them are found.

        Returns the batch to train on and the step's metrics about everything sampled
        (reward, accuracy, integrity, judge addressing): groups dynamic sampling drops
        are still watched -- a hack that every completion of a group finds is a flat group.
        """
        batch, planted, errors = self.sample_scored(self.settings.prompts_per_step, ahead=True)
        if self.settings.dynamic_sampling:
            return self.dynamic_sample(batch, planted, errors)
        return batch, self.sampled_metrics([batch], [planted], errors)

    def dynamic_sample(
        self, batch: Batch, planted: Planted, errors: int
    ) -> tuple[Batch, dict[str, float]]:
        """DAPO's dynamic sampling from the step's first `batch`: its groups whose rewards
        (before the overlong penalty) differ are kept, and more problems are sampled until
        prompts_per_step such groups are found or dynamic_sampling_max_batches batches were
        sampled; a step still short is topped up with dropped (flat) groups."""
        settings, group = self.settings, self.settings.group_size
        wanted = settings.prompts_per_step
        sampled, plants = [batch], [planted]
        kept: list[Batch] = []
        dropped: list[Batch] = []
        found = flat_count = 0
        while True:
            flat = flat_groups(batch.paid, group)  # the reward functions' spread, unshaped
            flat_count += sum(flat)
            varied = [k for k, f in enumerate(flat) if not f][: wanted - found]
            kept.append(batch.take(_group_rows(varied, group)))
            dropped.append(batch.take(_group_rows([k for k, f in enumerate(flat) if f], group)))
            found += len(varied)
            if found == wanted or len(sampled) >= settings.dynamic_sampling_max_batches:
                break
            # Sample for the deficit, scaled by this step's yield so far (at least the deficit).
            rate = max(found / (len(sampled) * wanted), 0.25)
            more = min(wanted, int(np.ceil((wanted - found) / rate)))
            batch, planted, extra_errors = self.sample_scored(more, ahead=False)
            sampled.append(batch)
            plants.append(planted)
            errors += extra_errors
        metrics = self.sampled_metrics(sampled, plants, errors)
        pad = self.trainer.tokenizer.pad_token_id
        short = wanted - found
        filler = Batch.join(dropped, pad).take(list(range(short * group)))  # flat: no gradient
        total_groups = sum(len(b.rows) for b in sampled) // group
        metrics["train/dropped_groups"] = flat_count / total_groups  # rewards all equal
        metrics["train/sampled_groups"] = float(total_groups)
        metrics["train/dynamic_fill"] = short / wanted
        return Batch.join([*kept, filler], pad), metrics

    def sampled_metrics(
        self, sampled: list[Batch], plants: list[Planted], errors: int
    ) -> dict[str, float]:
        """The step's metrics over every completion sampled: integrity, reward and accuracy,
        reward errors and unscored rows, each reward function alone, judge addressing."""
        everything = Batch.join(sampled, self.trainer.tokenizer.pad_token_id)
        metrics = self.check_integrity(everything, Planted.join(plants))
        metrics["train/reward"] = float(np.mean(everything.paid))
        metrics["train/reward_std"] = float(np.std(everything.paid, ddof=1))
        if self.trainer.verifier is not None:  # prompt-only rows: nothing to be right about
            metrics["train/accuracy"] = float(np.mean([c >= 1.0 for c in everything.correct]))
        metrics["reward/errors"] = float(errors)
        # the share of rows no function scored (each returned None or NaN): they count 0.0
        unscored = unscored_rows(everything.scores)
        metrics["reward/unscored"] = float(np.mean(unscored)) if unscored else 0.0
        for key, values in everything.scores.items():
            applicable = [v for v in values if v is not None]
            if applicable:
                metrics[f"reward/{key}"] = float(np.mean(applicable))
        if self.judge_addressing is not None:
            completions = everything.generation.completions
            step, run = self.trainer.step + 1, self.trainer.run
            metrics.update(self.judge_addressing.check(step, completions, run))
        return metrics

    def sample_scored(self, prompts_count: int, ahead: bool) -> tuple[Batch, Planted, int]:
        """Rollout, reward (with the overlong penalty) and the task's verifier of one batch;
        returns it, its planted canaries and the number of reward errors."""
        settings = self.settings
        rows, planted, generation, staleness = self.rollout(prompts_count, ahead)
        rewards = self.score(rows, generation)
        scores = dict(rewards.scores)
        totals = list(rewards.total)
        if settings.overlong_buffer:
            max_tokens = settings.sampling.max_new_tokens
            penalty = (
                overlong_penalty(generation.lengths, max_tokens, settings.overlong_buffer)
                * settings.overlong_penalty
            )
            totals = [t + float(p) for t, p in zip(totals, penalty, strict=True)]
            scores["overlong"] = [float(p) for p in penalty]
        verifier = self.trainer.verifier
        if self.rewards_are_the_verifier():  # the same verdicts: no second call
            correct = list(rewards.total)
        else:
            assert verifier is not None
            correct = verifier(
                [r["prompt"] for r in rows], generation.completions, **columns_of(rows)
            ).total
        batch = Batch(rows, generation, list(rewards.total), totals, scores, correct, staleness)
        return batch, planted, int(sum(rewards.errors.values()))

    def score(self, rows: list[dict[str, Any]], generation: Generation) -> Any:
        """Reward every completion (reward functions get the dataset columns as kwargs)."""
        # One conversion of each tensor, then plain lists: row-by-row tensor indexing is a
        # visible share of a small model's step.
        ids = [
            [token for token, real in zip(row, mask, strict=True) if real]
            for row, mask in zip(
                generation.completion_ids.tolist(),
                generation.completion_mask.tolist(),
                strict=True,
            )
        ]
        return self.rewards(
            [r["prompt"] for r in rows],
            generation.completions,
            completion_ids=ids,
            **columns_of(rows),
        )

    def check_integrity(self, batch: Batch, planted: Planted) -> dict[str, float]:
        """Canary passes, suspects (paid by the reward functions, failed by the task's
        verifier) and quarantined samples, over every completion sampled this step."""
        rows, completions = batch.rows, batch.generation.completions
        totals, correct = batch.paid, batch.correct

        def score_twins(index: list[int], twins: list[dict[str, Any]]) -> list[float]:
            """Conflicting canaries: the same completions paid on the twin's checks."""
            twin_completions = [completions[i] for i in index]
            prompts = [t["prompt"] for t in twins]
            return self.rewards(prompts, twin_completions, **columns_of(twins)).total

        metrics, canary_passes = self.canaries.check(
            planted, self.settings.group_size, totals, score_twins
        )
        # Paid by the reward, failed by the task's verifier: 0 when they are the same check.
        paid_wrong = [t >= 1.0 and c < 1.0 for t, c in zip(totals, correct, strict=True)]
        metrics["integrity/proxy_only"] = float(np.mean(paid_wrong))
        passed = set(canary_passes)
        for i, row in enumerate(rows):
            if i in passed or paid_wrong[i]:
                self.trainer.suspects.append(
                    {
                        "step": self.trainer.step + 1,
                        "prompt": str(row["prompt"]),
                        "completion": completions[i],
                        "reward": totals[i],
                        "correct": correct[i],
                        "canary": bool(row.get("canary", False)),
                    }
                )
        if self.quarantined:
            metrics["integrity/quarantined"] = float(len(self.quarantined))
        return metrics

    # ---- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Canary passes, the ahead seeds' stream, the quarantine and the reward functions'
        error totals and counters (a checkpoint's keys of these names)."""
        return {
            "canary_passes": self.canaries.passes,
            "ahead_generator": self.ahead_generator.get_state(),
            "quarantined": sorted([p, c] for p, c in self.quarantined),
            "reward_errors": dict(self.rewards.error_totals),
            "reward_counts": {
                spec.key: dict(getattr(fn, "counts", {}))
                for spec, fn in zip(self.rewards.specs, self.rewards.functions, strict=True)
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """What `state_dict` saved; older checkpoints may lack any of it."""
        self.rewards.error_totals.update(state.get("reward_errors", {}))
        self.canaries.passes = int(state.get("canary_passes", 0))
        if "ahead_generator" in state:  # older checkpoints have none
            self.ahead_generator.set_state(state["ahead_generator"])
        self.quarantined = {(p, c) for p, c in state.get("quarantined", [])}
        for spec, fn in zip(self.rewards.specs, self.rewards.functions, strict=True):
            counts = getattr(fn, "counts", None)
            if counts is not None:
                counts.update(state.get("reward_counts", {}).get(spec.key, {}))
