"""GRPO: Group Relative Policy Optimization (Shao et al. 2024, https://arxiv.org/abs/2402.03300).

One step, readable top to bottom in `iterate`:

    1. rollout   draw `prompts_per_step` problems, sample `group_size` completions of each
    2. reward    score every completion with the reward functions (verifiers), weighted sum
                 (1-2 with the integrity checks: payoff.algos.shared.collection)
    3. advantage A_i = (r_i - mean(group)) [/ std(group)]: better than its siblings -> push up
    4. update    `updates_per_batch` passes of minibatch steps on the clipped objective

    ratio_t  = pi(o_t | q, o_<t) / pi_old(o_t | q, o_<t)
    loss_t   = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A) + beta * KL_k3,t
    loss     = aggregate(w_t * loss_t over completion tokens)   (grpo | dapo | dr_grpo | bnpo)

w_t corrects the rollout/trainer mismatch (1 unless `mismatch_correction` is set). The
frontier's kit is here as options: DAPO's token-level loss, clip-higher, overlong shaping
and dynamic sampling; Dr. GRPO's unscaled advantages and constant normaliser; RLOO and
REINFORCE++ advantages; importance-sampling correction of the sampler's log-probs; and
asynchronous generation, where the next step's completions are sampled while this step
trains (docs/llm-rl.md says when to use which).

There is no value network: the group is the baseline. With beta = 0 no reference model is
kept at all (half the memory). The number of prompts per step is independent of the group
size, so G = 2 and G = 16 can be compared at equal prompts or equal completions.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from payoff.algos.base import restoring
from payoff.algos.sft import build_base_model
from payoff.algos.shared.collection import (
    Batch,
    CollectionSettings,
    GroupCollection,
    group_sampler,
)
from payoff.algos.shared.group import (
    Aggregation,
    Estimator,
    advantages_of,
    canonical_aggregation,
    flat_groups,
    grpo_loss,
    rows_with_gradient,
)
from payoff.algos.shared.lm import NO_FINAL_LM_EVALUATION, LMAlgorithm, LMKeys
from payoff.algos.shared.lm_step import accumulated_step
from payoff.algos.shared.mismatch import Correction, Mismatch, mismatch
from payoff.core.config import MAX_BATCH, MAX_GROUP, MAX_PROMPTS, MAX_THREADS, MAX_TOKENS, in_range
from payoff.core.errors import ConfigError
from payoff.models.base_model import BaseModelConfig
from payoff.models.lm import FrozenReference
from payoff.models.lm_optim import adamw, warmup_scheduler
from payoff.models.logprobs import batched_completion_logprobs, completion_logprobs
from payoff.monitor.detectors import Alarm, Monitor
from payoff.monitor.integrity import IntegrityKeys, Planted
from payoff.rewards.base import RewardMix, RewardSpec
from payoff.rollout.generation import Generation, SamplingConfig
from payoff.rollout.ray_generation import validate_generation_config
from payoff.rollout.ray_pool import RayConfig


@dataclass
class GRPOConfig(LMKeys, IntegrityKeys):
    """GRPO with verifiable rewards. Shared keys (seed, threads, task, steps, learning_rate,
    weight_decay, max_grad_norm, log/eval/checkpoint intervals in rollout batches):
    payoff.algos.shared.lm.LMKeys; integrity keys (default_monitors, canaries, inoculation):
    payoff.monitor.integrity.IntegrityKeys; on_alarm and rollback: payoff.algos.base.RunKeys.

    model: the policy. model.path = a local Hugging Face folder; empty = payoff's tiny
        Llama pretrained on this task by SFT first (`base` says how; cached on disk).
    base: pretraining settings for that tiny base model (ignored when model.path is set).
        Its length decides where RL starts: stopping early leaves room for RL to help.
    rewards: reward functions and weights; empty = the task's own verifier (math for
        arithmetic, code for python, ...). Each is logged alone as reward/<label>.
    steps: rollout batches (each followed by updates_per_batch passes of optimizer steps).
    prompts_per_step: distinct problems per rollout batch, independent of group_size.
    group_size: G completions per problem (>= 2); the group mean is the baseline. A group
        whose completions all score the same contributes no gradient: with a very weak or
        very strong model most groups are flat, and a bigger G finds more signal.
    updates_per_batch: passes over each rollout batch (mu in the paper). With 1 the update is
        exactly on-policy and the ratio is 1; more reuses samples and is where clipping acts.
    minibatch_size: completions per optimizer step (0 = the whole batch, one step per pass).
        A multiple of group_size shuffles whole groups and runs each prompt once per group
        (faster); any other divisor of the batch shuffles single completions.
    learning_rate: RL wants a smaller lr than SFT.
    warmup_steps: optimizer steps of linear lr warmup. Adam's first steps move every weight
        by about lr whatever the gradient's size, which on noisy RL gradients can wreck a
        small model in one step; warming up avoids that.
    clip_eps / clip_eps_high: the ratio clip range [1 - clip_eps, 1 + clip_eps_high]
        (clip_eps_high null = symmetric; DAPO raises it to ~0.28 to keep exploring).
    beta: KL coefficient to the frozen starting model (k3 estimator). 0 = no KL and no
        reference model in memory.
    skip_zero_advantage: with beta = 0 a completion whose advantage is 0 (every completion
        of a group whose rewards are all equal) adds exactly nothing to the gradient, so its
        forward and backward passes are skipped; the loss keeps the whole minibatch's
        denominators, so the update is the same as without skipping. Flat groups are common
        (30-50% of the arithmetic recipe's), so this saves that share of the update's work.
        train/entropy is then the mean over the completions trained on. false runs every row.
    scale_rewards: divide advantages by the group's reward std (GRPO); false = Dr. GRPO's
        mean-centring only, which does not up-weight nearly-solved or hopeless prompts.
    advantage_estimator: 'grpo' (r - group mean [/ group std]), 'rloo' (r - mean of the
        other G - 1) or 'reinforce_pp' (r - group mean, normalized over the whole batch).
    loss_aggregation: 'grpo' = mean over each completion's tokens, then over completions
        (the paper; a short wrong answer is punished more per token); 'dapo' = mean over all
        tokens of the optimizer step; 'dr_grpo' = sum / (completions * max_new_tokens), free
        of any length bias; 'bnpo' = mean over each micro-batch's tokens, averaged over the
        micro-batches. 'sequence' and 'token' are the older names of grpo and dapo.
    microbatch_size: completions per forward/backward inside an optimizer step (0 = the
        whole minibatch at once); gradients accumulate, so the update is the same (bnpo
        apart: its normalizer is the micro-batch) in less memory. A multiple of group_size
        keeps the one prompt pass per group.
    overlong_buffer / overlong_penalty: DAPO's soft overlong punishment: the last
        `overlong_buffer` tokens before max_new_tokens cost up to `overlong_penalty` reward,
        linearly (0 = off). Logged as reward/overlong.
    mask_truncated: truncated completions (no EOS or stop string) leave the loss (DAPO's
        overlong filtering): they are neither pushed up nor down.
    dynamic_sampling: DAPO's dynamic sampling: drop the groups whose rewards (before the
        overlong penalty) are all equal and sample more prompts until prompts_per_step
        groups carry signal, at most `dynamic_sampling_max_batches` generation batches per
        step; a step still short is topped up with dropped groups. Logged:
        train/dropped_groups (share of sampled groups that were flat), train/sampled_groups,
        train/dynamic_fill. Rewards, accuracy and the integrity monitors see every sampled
        completion, dropped or not.
    mismatch_correction: importance weights for the difference between the sampler's and
        the trainer's log-probs of the sampled tokens ('none', 'token_tis', 'sequence_tis',
        'sequence_mask'; payoff.algos.shared.mismatch), capped at `mismatch_cap`; 'auto' =
        token_tis with async_generation sampling ahead (max_staleness > 0), else none. train/mismatch_kl and
        train/mismatch_max_logp_diff are logged every step whatever the choice.
    async_generation / max_staleness: sample the next step's completions while this step
        trains, in a second process (backend local) or on the Ray workers (backend ray),
        up to `max_staleness` steps ahead (policy versions behind). max_staleness 0 samples
        in the second process but waits, and reproduces synchronous results exactly (with
        the same threads). On 2 cores give the trainer and the sampler one thread each
        (threads: 1): more threads than cores makes both spin and run several times slower.
        Resuming, a rollback or the end of the run drops the batches sampled ahead.
    sampler_threads: torch threads of the sampling process (0 = threads).
    temperature / top_p / max_new_tokens / stop: sampling (see SamplingConfig). The loss uses
        logits / temperature, the same distribution the samples came from.
    eval_every / eval_size: greedy held-out accuracy during training (test split); 0: none
        during training (the final evaluation still runs, with final_eval), as for the RL
        algorithms. 0 in Python, 25 for `payoff train` runs (run_defaults).
    final_eval_k: pass@k measured at the end (e.g. [1, 8]), with final_eval; sampled at
        temperature 1.
    backend: where completions are sampled: 'local' (this process, the default) or 'ray'
        (Ray actors with a copy of the model each; needs payoff[distributed]). Workers load
        the starting model from its folder, which every node must be able to read.
    ray: address / num_workers / cpus_per_worker / max_restarts of the Ray workers (see
        payoff.rollout.ray_generation and docs/scaling.md). Trap: num_workers 1 equals
        local bit for bit only when ray.cpus_per_worker equals threads.
    """

    base: BaseModelConfig = field(default_factory=BaseModelConfig)
    rewards: list[RewardSpec] = field(default_factory=list)
    prompts_per_step: int = field(
        default=16,
        metadata=in_range(
            0,
            low_open=True,
            most=MAX_PROMPTS,
            product=("group_size", 65_536, "completions in one rollout batch"),
        ),
    )
    group_size: int = field(default=8, metadata=in_range(2, most=MAX_GROUP))
    updates_per_batch: int = field(default=1, metadata=in_range(0, low_open=True))
    minibatch_size: int = field(default=0, metadata=in_range(0, most=MAX_BATCH))
    learning_rate: float = field(default=2e-4, metadata=in_range(0, low_open=True))
    warmup_steps: int = field(default=10, metadata=in_range(0))
    clip_eps: float = field(default=0.2, metadata=in_range(0, low_open=True))
    clip_eps_high: float | None = field(default=None, metadata=in_range(0, low_open=True))
    beta: float = field(default=0.0, metadata=in_range(0))
    skip_zero_advantage: bool = True
    scale_rewards: bool = True
    advantage_estimator: Estimator = "grpo"
    loss_aggregation: Aggregation = "grpo"
    microbatch_size: int = field(default=0, metadata=in_range(most=MAX_BATCH))
    overlong_buffer: int = field(default=0, metadata=in_range(most=MAX_TOKENS))
    overlong_penalty: float = 1.0
    mask_truncated: bool = False
    dynamic_sampling: bool = False
    dynamic_sampling_max_batches: int = 4
    mismatch_correction: Correction | Literal["auto"] = "auto"
    mismatch_cap: float = 2.0
    async_generation: bool = False
    max_staleness: int = 1
    sampler_threads: int = field(default=0, metadata=in_range(0, MAX_THREADS))
    temperature: float = field(default=1.0, metadata=in_range(0, low_open=True))
    top_p: float = field(default=1.0, metadata=in_range(0, 1, low_open=True))
    max_new_tokens: int = field(default=8, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    stop: list[str] = field(default_factory=list)
    log_every: int = field(default=1, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=50, metadata=in_range(0, low_open=True))
    final_eval_k: list[int] = field(default_factory=lambda: [1, 8], metadata=in_range(1))
    backend: Literal["local", "ray"] = "local"
    ray: RayConfig = field(default_factory=RayConfig)

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 25}  # payoff train runs

    def validate(self) -> None:
        # Ranges of single keys (group_size >= 2, beta >= 0, clip_eps > 0, ...) are checked
        # by core.config.
        batch = self.prompts_per_step * self.group_size
        if self.minibatch_size < 0 or self.minibatch_size > batch:
            raise ConfigError(
                f"config key 'minibatch_size' must be in 0..{batch} (prompts_per_step * group_size), "
                f"got {self.minibatch_size}"
            )
        if self.minibatch_size and batch % self.minibatch_size:
            raise ConfigError(
                f"minibatch_size {self.minibatch_size} does not divide the {batch} completions of a "
                f"step; {batch % self.minibatch_size} would be dropped. Pick a divisor of {batch}"
            )
        micro = self.minibatch_size or batch
        if self.microbatch_size < 0 or (self.microbatch_size and micro % self.microbatch_size):
            raise ConfigError(
                f"config key 'microbatch_size' must be 0 or a divisor of the minibatch "
                f"({micro} completions), got {self.microbatch_size}"
            )
        if self.overlong_buffer < 0 or self.overlong_buffer >= self.max_new_tokens:
            raise ConfigError(
                f"config key 'overlong_buffer' must be in 0..{self.max_new_tokens - 1} "
                f"(tokens before max_new_tokens = {self.max_new_tokens}), got {self.overlong_buffer}"
            )
        if self.overlong_penalty < 0:
            raise ConfigError(
                f"config key 'overlong_penalty' must be >= 0, got {self.overlong_penalty}"
            )
        if self.dynamic_sampling_max_batches < 1:
            raise ConfigError(
                "config key 'dynamic_sampling_max_batches' must be >= 1, got "
                f"{self.dynamic_sampling_max_batches}"
            )
        if self.microbatch_size and self.microbatch_size % self.group_size:
            warnings.warn(
                f"microbatch_size {self.microbatch_size} is not a multiple of group_size "
                f"{self.group_size}: each completion then runs its prompt again (slower); a "
                f"multiple keeps one prompt pass per group",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.sampler_threads and self.backend == "ray":
            warnings.warn(
                "sampler_threads is ignored with backend: ray (each worker uses "
                "ray.cpus_per_worker threads)",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.mismatch_cap <= 1:
            raise ConfigError(f"config key 'mismatch_cap' must be > 1, got {self.mismatch_cap}")
        if self.max_staleness < 0:
            raise ConfigError(f"config key 'max_staleness' must be >= 0, got {self.max_staleness}")
        canonical_aggregation(self.loss_aggregation)
        SamplingConfig(self.temperature, self.top_p, self.max_new_tokens, self.stop).validate()
        if self.temperature == 0:
            raise ConfigError(
                "GRPO needs temperature > 0: greedy groups are identical, so every advantage is 0"
            )
        if self.backend == "ray":
            validate_generation_config(self.ray)

    @property
    def correction(self) -> Correction:
        """The mismatch correction in force ('auto' resolved)."""
        if self.mismatch_correction == "auto":  # stale samples only when sampled ahead
            return "token_tis" if self.async_generation and self.max_staleness > 0 else "none"
        return self.mismatch_correction


@dataclass
class _UpdateInputs:
    """What every minibatch step of one GRPO update reads, and the statistics it fills."""

    generation: Generation
    advantages: torch.Tensor  # [B], on the CPU
    mask: torch.Tensor  # completion tokens in the loss [B, T]
    minibatch: int
    micro: int
    on_policy: bool
    group: int  # completions sharing one prompt pass (1: each row its own)
    aggregation: str
    skip: bool  # rows with a zero advantage skip their forward and backward
    old_logprobs: torch.Tensor | None = None  # pi_old, where samples are reused
    whole: Mismatch | None = None  # the sampler's mismatch over the whole batch
    ref_logprobs: torch.Tensor | None = None
    stats: dict[str, list[float]] = field(
        default_factory=lambda: {
            k: []
            for k in ("loss", "policy", "kl", "clip", "entropy", "grad")
            + ("mismatch_kl", "mismatch_max", "is_weight", "is_masked")
        }
    )

    def note(self, found: Mismatch) -> None:
        """Keep a mismatch's statistics (sampler against trainer log-probs)."""
        self.stats["mismatch_kl"].append(found.kl)
        self.stats["mismatch_max"].append(found.max_logp_diff)
        self.stats["is_weight"].append(found.mean_weight)
        self.stats["is_masked"].append(found.masked)


class GRPO(LMAlgorithm):
    """GRPO on a language model with verifiable rewards."""

    config: GRPOConfig
    saved = ("model", "optimizer", "scheduler", "samples_seen", "rng", "generator")
    eval_at_end = True

    @property
    def eval_at_start(self) -> bool:  # type: ignore[override]
        """Where RL starts from, on a run's curve (where anything evaluates)."""
        return self.run is not None and (self.config.eval_every > 0 or self.config.final_eval)

    def setup(self) -> None:
        config = self.config
        model_config = self.setup_lm(
            lambda: build_base_model(config.task, config.base, config.max_new_tokens, config.device)
        )
        self.generator = torch.Generator().manual_seed(config.seed)
        # The frozen reference for the KL term; with beta = 0 there is none to keep.
        self.reference = FrozenReference(self.model) if config.beta > 0 else None
        specs = config.rewards or [RewardSpec(name=n) for n in self.task.default_rewards]
        if not specs:
            raise ConfigError(
                f"the rows of task {config.task.name!r} have no answers (prompt-only), so there "
                f"is no verifier to reward with: give rewards=[...] that score a completion "
                f"without a reference (a function of yours, a judge or a reward model; "
                f"docs/own-material.md)"
            )
        self.rewards = RewardMix(specs, on_event=self._reward_event, defer_unavailable=restoring())
        self.sampler = group_sampler(config, model_config, self.model, self.tokenizer)
        # 1-2 of each step: sampling, rewards and the integrity checks on them
        self.collection = GroupCollection(
            self,
            CollectionSettings.of(config),
            self.sampler,
            self.rewards,
            config.canaries,
            config.inoculation,
            seed=config.seed,
        )
        self.ahead_generator = self.collection.ahead_generator  # saved with the checkpoint
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        # fused: one kernel for the whole step, faster on CPU
        self.optimizer = adamw(
            self.trainable, config.learning_rate, config.weight_decay, fused=True
        )
        self.scheduler = warmup_scheduler(self.optimizer, config.warmup_steps)
        self.step = 0
        self.samples_seen = 0
        self._reported_unisolated = False

    def default_monitors(self) -> list[Monitor]:
        """Integrity checks (payoff.monitor.integrity; GroupCollection.monitors)."""
        return self.collection.monitors() if self.config.default_monitors else []

    def quarantine(self, alarm: Alarm) -> int:
        """Every suspect sample since the alarm's onset leaves the loss for good."""
        return self.collection.quarantine(alarm)

    def after_rollback(self) -> None:
        self.sampler.weights_updated()  # remote samplers get the restored weights
        # batches sampled ahead came from the weights rolled back
        self.collection.drop_pending(wait=True)
        # counted again from the rollback, or the alarm repeats at once
        self.collection.canaries.passes = 0

    def stop_strings(self) -> list[str]:
        return self.config.stop

    def _reward_event(self, kind: str, message: str, **evidence: Any) -> None:
        if self.run is not None:
            self.run.event(self.step, kind, message, **evidence)

    # ---- one step, in four parts: 1-2 in payoff.algos.shared.collection ---------------------
    def rollout(
        self, prompts_count: int | None = None, ahead: bool = True
    ) -> tuple[list[dict[str, Any]], Planted, Generation, int]:
        """1. G completions of each of `prompts_count` problems (GroupCollection.rollout)."""
        return self.collection.rollout(prompts_count, ahead)

    def sample_scored(self, prompts_count: int, ahead: bool) -> tuple[Batch, Planted, int]:
        """1-2. One batch sampled and rewarded (GroupCollection.sample_scored)."""
        return self.collection.sample_scored(prompts_count, ahead)

    def collect(self) -> tuple[Batch, dict[str, float]]:
        """1-2. The step's batch and the metrics of all it sampled (GroupCollection.collect)."""
        return self.collection.collect()

    def update(self, generation: Generation, advantages: torch.Tensor) -> dict[str, float]:
        """4. updates_per_batch passes of minibatch steps on the GRPO loss.

        `advantages` [B] stay on the CPU with the shuffling; each minibatch's go to the model.
        A minibatch runs in micro-batches of `microbatch_size` whose gradients add up.
        """
        config = self.config
        inputs = self._update_inputs(generation, advantages)
        batch = inputs.generation.prompt_ids.shape[0]
        if not self.model.training:  # the sampler restores the mode; skip a no-op walk
            self.model.train()
        for _ in range(config.updates_per_batch):
            order = self._minibatch_order(batch, inputs.on_policy)
            for start in range(0, batch, inputs.minibatch):
                self._minibatch_step(inputs, order[start : start + inputs.minibatch])
        stats = inputs.stats
        out_stats = {k: float(np.mean(v)) if v else float("nan") for k, v in stats.items()}
        if stats["mismatch_max"]:
            out_stats["mismatch_max"] = float(np.max(stats["mismatch_max"]))
        return out_stats

    def _update_inputs(self, generation: Generation, advantages: torch.Tensor) -> _UpdateInputs:
        """What every minibatch step of one update reads: the masks (DAPO's overlong
        filtering applied), pi_old's log-probs where samples are reused after the policy
        moves, the reference's where a KL term needs them, and the statistics to fill."""
        config = self.config
        g = generation.to(self.device)  # a Ray sampler's generations arrive on the CPU
        batch = g.prompt_ids.shape[0]
        minibatch = config.minibatch_size or batch
        micro = config.microbatch_size or minibatch
        mask_all = g.completion_mask
        if config.mask_truncated:  # DAPO's overlong filtering: truncated rows leave the loss
            mask_all = mask_all * (~g.truncated).long()[:, None]
            advantages = advantages.masked_fill(g.truncated.cpu(), 0.0)
        inputs = _UpdateInputs(
            generation=g,
            advantages=advantages,
            mask=mask_all,
            minibatch=minibatch,
            micro=micro,
            on_policy=config.updates_per_batch == 1 and minibatch == batch,
            # A micro-batch of whole groups runs each prompt once for all G of its completions.
            group=config.group_size if micro % config.group_size == 0 else 1,
            aggregation=canonical_aggregation(config.loss_aggregation),
            # Only the policy term has a gradient when there is no KL term: A * (...).
            skip=config.skip_zero_advantage and self.reference is None,
        )
        batch_args = (
            g.prompt_ids,
            g.prompt_mask,
            g.completion_ids,
            mask_all,
            config.temperature,
            minibatch,
            config.group_size if minibatch % config.group_size == 0 else 1,
        )
        if not inputs.on_policy:
            # Samples are reused after the policy moves, so pin pi_old before the first step.
            inputs.old_logprobs = batched_completion_logprobs(self.model, *batch_args)
            inputs.whole = mismatch(
                inputs.old_logprobs, g.logprobs, mask_all, config.correction, config.mismatch_cap
            )
            inputs.note(inputs.whole)
        if self.reference is not None:
            with self.reference.model() as reference:
                inputs.ref_logprobs = batched_completion_logprobs(reference, *batch_args)
        return inputs

    def _minibatch_order(self, batch: int, on_policy: bool) -> torch.Tensor:
        """The rows in the order one pass takes them: as sampled on-policy, else shuffled
        (whole groups together where a minibatch holds whole groups)."""
        group_size = self.config.group_size
        if on_policy:
            return torch.arange(batch)
        if (self.config.minibatch_size or batch) % group_size == 0:
            groups = torch.randperm(batch // group_size, generator=self.generator)
            return (groups[:, None] * group_size + torch.arange(group_size)).flatten()
        return torch.randperm(batch, generator=self.generator)

    def _minibatch_step(self, inputs: _UpdateInputs, index: torch.Tensor) -> None:
        """One optimizer step on the minibatch `index`, in micro-batches whose gradients add
        up; its losses, entropy and gradient norm go into `inputs.stats`."""
        config, mask_all, stats = self.config, inputs.mask, inputs.stats
        # The denominators of the whole minibatch (grpo, dapo, dr_grpo) or of each
        # micro-batch (bnpo), fixed before rows without gradient are skipped.
        rows, tokens = len(index), int(mask_all[index].sum())
        chunks = [index[i : i + inputs.micro] for i in range(0, len(index), inputs.micro)]
        # Sums over the micro-batches: each part is normalized by the minibatch's
        # denominators (bnpo: scaled by 1 / micro-batches), so the sum is its value.
        totals = dict.fromkeys(("loss", "policy", "kl", "clip"), 0.0)
        # every row skipped: the loss and its gradient are exactly 0, and the step is taken
        with accumulated_step(
            self.optimizer, self.trainable, config.max_grad_norm, self.scheduler
        ) as step:
            for chunk in chunks:
                chunk_rows, chunk_tokens, scale = rows, tokens, 1.0
                if inputs.aggregation == "bnpo":
                    chunk_rows, chunk_tokens = len(chunk), int(mask_all[chunk].sum())
                    scale = 1.0 / len(chunks)
                if inputs.skip:  # rows with no gradient need no forward or backward
                    chunk = chunk[rows_with_gradient(inputs.advantages[chunk], inputs.group)]
                if not len(chunk):
                    continue
                parts, entropy = self._chunk_loss(inputs, chunk, chunk_rows, chunk_tokens)
                step.backward(parts.loss * scale)
                totals["loss"] += parts.loss.item() * scale
                totals["policy"] += parts.policy_loss.item() * scale
                totals["kl"] += parts.kl.item() * scale
                totals["clip"] += parts.clip_fraction.item() * scale
                stats["entropy"].append(entropy)
            for key, value in totals.items():
                stats[key].append(value)
        stats["grad"].append(step.grad_norm)

    def _chunk_loss(
        self, inputs: _UpdateInputs, chunk: torch.Tensor, rows: int, tokens: int
    ) -> tuple[Any, float]:
        """The GRPO loss of one micro-batch (its parts) and its mean token entropy; on-policy,
        the sampler's log-probs are compared with this pass's (the mismatch noted)."""
        config, g = self.config, inputs.generation
        mask = inputs.mask[chunk]
        out = completion_logprobs(
            self.model,
            g.prompt_ids[chunk],
            g.prompt_mask[chunk],
            g.completion_ids[chunk],
            mask,
            config.temperature,
            with_entropy=True,
            group_size=inputs.group,
        )
        if inputs.old_logprobs is None:  # on-policy: the trainer's start is this pass
            old = out.logprobs.detach()
            here = mismatch(old, g.logprobs[chunk], mask, config.correction, config.mismatch_cap)
            inputs.note(here)
            weights = here.weights
        else:
            old = inputs.old_logprobs[chunk]
            whole = inputs.whole
            weights = None if whole is None or whole.weights is None else whole.weights[chunk]
        parts = grpo_loss(
            out.logprobs,
            old,
            inputs.advantages[chunk].to(self.device),
            mask,
            inputs.ref_logprobs[chunk] if inputs.ref_logprobs is not None else None,
            beta=config.beta,
            clip_low=config.clip_eps,
            clip_high=config.clip_eps if config.clip_eps_high is None else config.clip_eps_high,
            aggregation=inputs.aggregation,  # type: ignore[arg-type]
            max_tokens=config.max_new_tokens,
            rows=rows,
            tokens=tokens,
            weights=weights,
        )
        assert out.entropy is not None
        return parts, float((out.entropy * mask).sum() / mask.sum().clamp(min=1))

    # ---- the loop -------------------------------------------------------------------------
    def iterate(self) -> None:
        """One step: rollout and reward (with dynamic sampling: until the batch has signal),
        advantages, update; keeps the step's record."""
        started = time.time()
        batch, sampled_metrics = self.collect()
        scored = time.time()
        stats = self.update(batch.generation, self.advantages(batch))
        self.sampler.weights_updated()  # remote samplers send the new weights
        self.step += 1
        self.samples_seen += len(batch.rows)
        elapsed = time.time() - started
        metrics: dict[str, Any] = {
            "samples": self.samples_seen,
            **sampled_metrics,  # reward, accuracy, integrity: over every completion sampled
            **self.train_metrics(batch, stats),
            "perf/step_s": elapsed,
            "perf/rollout_s": scored - started,  # generation (or waiting for it) and rewards
            "perf/update_s": time.time() - scored,
        }
        if not self.config.async_generation:
            tokens = float(batch.generation.lengths.float().sum())
            metrics["perf/tokens_per_s"] = tokens / max(scored - started, 1e-9)
        metrics.update(self.rewards.counters())
        if not self._reported_unisolated and any(k.endswith("/unisolated") for k in metrics):
            self._reported_unisolated = True
            self._reward_event(
                "sandbox_unisolated",
                "model-written code ran without OS isolation (sandbox=unsafe-process): "
                "it could read and write what this process can",
            )
        metrics.update(self.sampler.metrics())
        self._record = metrics
        self._samples = [  # the first prompt's group: what the rewards saw, for the report
            {
                "step": self.step,
                "prompt": str(batch.rows[i]["prompt"]),
                "completion": batch.generation.completions[i],
                "reward": batch.totals[i],
                **{key: values[i] for key, values in batch.scores.items()},
            }
            for i in range(min(self.config.group_size, len(batch.rows)))
        ]

    def advantages(self, batch: Batch) -> torch.Tensor:
        """3. Each completion's advantage over its group [B]; 0 for the samples an alarm
        quarantined, which never enter the loss again."""
        config = self.config
        totals = torch.tensor(batch.totals, dtype=torch.float32)
        advantages = advantages_of(
            totals, config.group_size, config.advantage_estimator, config.scale_rewards
        )
        if self.collection.quarantined:
            for i in self.collection.quarantined_rows(batch):
                advantages[i] = 0.0
        return advantages

    def train_metrics(self, batch: Batch, stats: dict[str, float]) -> dict[str, float]:
        """The update's statistics (`update`'s) and the trained batch's shape, as logged."""
        generation = batch.generation
        lengths = generation.lengths.float()
        metrics = {
            "train/loss": stats["loss"],
            "train/policy_loss": stats["policy"],
            "train/kl": stats["kl"],
            "train/entropy": stats["entropy"],
            "train/clip_fraction": stats["clip"],
            "train/grad_norm": stats["grad"],
            "train/flat_groups": float(np.mean(flat_groups(batch.totals, self.config.group_size))),
            "train/mismatch_kl": stats["mismatch_kl"],
            "train/mismatch_max_logp_diff": stats["mismatch_max"],
            "train/is_weight": stats["is_weight"],
            "train/staleness": float(batch.staleness),
            "train/completion_length": float(lengths.mean()),
            "train/completion_length_max": float(lengths.max()),
            "train/truncated": float(generation.truncated.float().mean()),
        }
        if self.config.correction == "sequence_mask":
            metrics["train/is_masked"] = stats["is_masked"]
        return metrics

    def progress_postfix(self) -> dict[str, Any]:
        if self.verifier is None:  # prompt-only rows
            return {
                "reward": self._record["train/reward"],
                "len": self._record["train/completion_length"],
            }
        return {
            "acc": self._record["train/accuracy"],
            "len": self._record["train/completion_length"],
        }

    def reward_without_reference(self) -> RewardMix:
        """Prompt-only rows: held-out completions are scored by the training rewards."""
        return self.rewards

    def eval_key(self) -> str:
        """The held-out score on the curve: accuracy, or the mean reward of prompt-only rows."""
        return "eval/accuracy" if self.verifier is not None else "eval/reward"

    def train_until(self, total: int) -> None:
        if self.state.step < total:
            self.rewards.check_available()  # at once, not after a batch is sampled
        super().train_until(total)

    def evaluate_now(self) -> None:
        if self.run is not None and getattr(self, "_samples", None):
            self.run.append_jsonl("samples.jsonl", self._samples)
        result = self.evaluate(self.config.task.eval_size, split="test", k=())
        self.log(
            self.step,
            samples=self.samples_seen,
            **{self.eval_key(): result.score, "eval/completion_length": result.mean_length},
        )

    def finish(self) -> None:
        """Close the Ray workers or the sampling process (their CPUs go to the final
        evaluation), evaluate, export."""
        self.collection.drop_pending(wait=False)
        self.sampler.close()
        config = self.config
        if not config.final_eval:
            self.export_model()
            if self.run is not None:
                self.run.write_summary(
                    final_line=NO_FINAL_LM_EVALUATION,
                    steps=self.step,
                    samples=self.samples_seen,
                    seconds=round(self.run.elapsed(), 1),
                    model_dir=str(self.run.path / "model"),
                    base_model=getattr(self, "base_model_path", config.model.path),
                )
            return
        result = self.final_evaluation(config.task.eval_size, split="test", k=config.final_eval_k)
        ood = (  # own data may come without an out-of-distribution split
            self.evaluate(config.task.eval_size, split="ood", k=())
            if self.task.has_split("ood")
            else None
        )
        start = self.first_logged(self.eval_key())  # the run's step 0, across resumes
        measure = self.eval_key().removeprefix("eval/")
        self.export_model()
        if self.run is not None:
            self.run.write_summary(
                final_eval=result.to_dict(),
                final_line=result.line(),
                **{  # start_accuracy and ood_accuracy; start_reward and ood_reward
                    f"start_{measure}": start[self.eval_key()] if start else None,
                    f"ood_{measure}": ood.score if ood is not None else None,
                },
                steps=self.step,
                samples=self.samples_seen,
                seconds=round(self.run.elapsed(), 1),
                model_dir=str(self.run.path / "model"),
                base_model=getattr(self, "base_model_path", config.model.path),
            )

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {**super().state_dict(), **self.collection.state_dict()}
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.reference is not None:
            self.reference.load_state_dict(state.get("reference"))
        self.collection.load_state_dict(state)


ALGORITHM = GRPO
