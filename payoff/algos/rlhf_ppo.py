"""PPO-RLHF: PPO on a language model against a reward model, leashed to the SFT model by a KL penalty.

The InstructGPT recipe (Ouyang et al. 2022; Ziegler et al. 2019, https://arxiv.org/abs/1909.08593),
one step readable top to bottom in `iterate`:

    1. rollout  sample a completion for each of `prompts_per_step` prompts from the policy
    2. reward   score = RM(prompt, completion), whitened by a running std; per token
                    r_t = -kl_coef * (log pi(o_t) - log ref(o_t))   (+ score on the last token)
    3. GAE      token-level advantages from a separate critic (an LM with a scalar head),
                gamma = 1 by default: the episode is the completion
    4. update   `ppo_epochs` passes of minibatch steps on the clipped policy loss and the
                clipped value loss; the KL coefficient is fixed or adapted towards `kl_target`

Logged every step: reward/proxy (the RM), reward/gold (when the task has a gold scorer),
reward/disagreement (the std across an ensemble reward model's members on these samples),
train/kl (per completion, summed over tokens), train/entropy, train/completion_length,
train/kl_coef and PPO's diagnostics (approx_kl, clip_fraction, value loss).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from payoff.algos.reward_model import (
    preference_base,
    proxy_preferences,
    small_base,
    styled_task,
    train_proxy,
)
from payoff.algos.shared.advantages import gae
from payoff.algos.shared.lm import (
    NO_FINAL_LM_EVALUATION,
    LMAlgorithm,
    LMEvalResult,
    LMKeys,
    columns_of,
)
from payoff.algos.shared.policy_loss import clipped_surrogate, value_loss
from payoff.core.config import MAX_BATCH, MAX_PROMPTS, MAX_TOKENS, absolute_path, in_range
from payoff.core.errors import ConfigError
from payoff.envs.tasks import TaskConfig
from payoff.envs.tasks.preferences import PreferenceDataConfig
from payoff.models.base_model import BaseModelConfig
from payoff.models.lm import FrozenReference
from payoff.models.lm_optim import adamw, train_step
from payoff.models.logprobs import batched_completion_logprobs, completion_logprobs
from payoff.monitor.detectors import Monitor
from payoff.monitor.integrity import MonitorKeys, lm_monitors
from payoff.monitor.judge_addressing import JudgeAddressing, is_model_scored
from payoff.rewards.base import RewardMix, RewardSpec
from payoff.rewards.learned import RewardModelScorer, build_scalar_model
from payoff.rollout.generation import LocalSampler, SamplingConfig


@dataclass
class RLHFPPOConfig(LMKeys, MonitorKeys):
    """PPO against a learned reward model with a per-token KL penalty to the SFT reference.
    Shared keys (seed, threads, steps, weight_decay, max_grad_norm, log/eval/checkpoint
    intervals in rollout batches): payoff.algos.shared.lm.LMKeys.

    model: the SFT policy (model.path; empty = the tiny SFT base model for `task`). The
        frozen reference and the critic's backbone start from the same weights.
    reward_model: folder of a trained reward model (RUN/reward_model or one member_k);
        an ensemble folder is averaged.
    rewards: reward functions instead of a reward model (e.g. the gold scorer
        payoff.envs.tasks.preferences:gold_reward, to check PPO itself).
    With neither, a proxy reward model is trained here first on `proxy_preferences`
    (`proxy_steps` steps at `proxy_learning_rate`): the over-optimization setting.
    task: prompts (and the gold scorer, for styled_addition).
    steps / prompts_per_step: rollout batches and completions per batch.
    ppo_epochs / minibatch_size: passes over each batch and completions per optimizer step.
    kl_coef: the KL penalty's starting coefficient. kl_target: null = fixed coefficient;
        a number = adaptive (Ziegler et al.): the coefficient grows when the per-completion
        KL is above the target and shrinks below it, by at most 20% per `kl_horizon` samples.
    whiten_rewards: divide RM scores by their running std (the RM's scale is arbitrary; this
        makes kl_coef mean the same thing for any RM).
    gamma / lam: GAE over completion tokens (gamma 1: no discount inside one answer).
    clip / value_clip / value_coef: PPO's ratio clip, the value clip and the value-loss weight.
    learning_rate / critic_learning_rate: AdamW for policy and critic.
    temperature / max_new_tokens: sampling; the loss uses the same temperature.
    eval_every: greedy gold score on held-out prompts, in steps (0: only before the first
        step and at the end, with final_eval; with neither, none: the default in Python).
        `payoff train` runs default to 10 (run_defaults).
    """

    base: BaseModelConfig = field(default_factory=small_base)
    task: TaskConfig = field(default_factory=styled_task)
    reward_model: str = ""
    rewards: list[RewardSpec] = field(default_factory=list)
    proxy_preferences: PreferenceDataConfig = field(default_factory=proxy_preferences)
    proxy_steps: int = field(default=300, metadata=in_range(0, low_open=True))
    proxy_learning_rate: float = field(default=2e-3, metadata=in_range(0, low_open=True))
    steps: int = field(default=40, metadata=in_range(0, low_open=True))
    prompts_per_step: int = field(
        default=64,
        metadata=in_range(
            0,
            low_open=True,
            most=MAX_PROMPTS,
            product=("group_size", 65_536, "completions in one rollout batch"),
        ),
    )
    ppo_epochs: int = field(default=2, metadata=in_range(0, low_open=True))
    minibatch_size: int = field(default=32, metadata=in_range(0, most=MAX_BATCH))
    kl_coef: float = field(default=0.05, metadata=in_range(0))
    kl_target: float | None = field(default=None, metadata=in_range(0, low_open=True))
    kl_horizon: int = field(default=10000, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    whiten_rewards: bool = True
    gamma: float = field(default=1.0, metadata=in_range(0, 1))
    lam: float = field(default=0.95, metadata=in_range(0, 1))
    clip: float = field(default=0.2, metadata=in_range(0, low_open=True))
    value_clip: float = field(default=0.2, metadata=in_range(0, low_open=True))
    value_coef: float = field(default=0.5, metadata=in_range(0))
    learning_rate: float = field(default=2e-4, metadata=in_range(0, low_open=True))
    critic_learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    weight_decay: float = field(default=0.01, metadata=in_range(0))
    temperature: float = field(default=1.0, metadata=in_range(0, low_open=True))
    max_new_tokens: int = field(default=24, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    log_every: int = field(default=1, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=20, metadata=in_range(0, low_open=True))

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 10}  # payoff train runs

    def __post_init__(self) -> None:
        self.reward_model = absolute_path(self.reward_model)  # saved absolute: found anywhere

    def validate(self) -> None:
        if self.reward_model and self.rewards:
            raise ConfigError(
                "set at most one of 'reward_model' (a folder written by a reward_model run, e.g. "
                "runs/<run>/reward_model) and 'rewards' (reward functions); with neither, a proxy "
                f"is trained here. Got reward_model={self.reward_model!r}, rewards={self.rewards}"
            )
        # Ranges of single keys (counts > 0, kl_coef >= 0, ...) are checked by core.config.
        if self.eval_every < 0 or self.minibatch_size <= 0:
            raise ConfigError(
                f"config key 'eval_every' must be >= 0 (0: none during training) and "
                f"'minibatch_size' > 0, got {self.eval_every} and {self.minibatch_size}"
            )
        if self.prompts_per_step % self.minibatch_size:
            raise ConfigError(
                f"minibatch_size {self.minibatch_size} does not divide prompts_per_step {self.prompts_per_step}"
            )


class AdaptiveKLController:
    """Ziegler et al. (2019) eq. 2: beta *= 1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon."""

    def __init__(self, coef: float, target: float | None, horizon: int):
        self.coef, self.target, self.horizon = coef, target, horizon

    def update(self, kl: float, samples: int) -> None:
        if self.target is None:
            return  # a fixed coefficient
        error = float(np.clip(kl / self.target - 1.0, -0.2, 0.2))
        self.coef *= 1.0 + error * samples / self.horizon


class RunningStd:
    """Running variance of a scalar stream (Welford / parallel merge), for reward whitening."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, values: np.ndarray) -> None:
        n, mean, var = len(values), float(values.mean()), float(values.var())
        delta, total = mean - self.mean, self.count + n
        self.m2 += var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    @property
    def std(self) -> float:
        return float(np.sqrt(self.m2 / self.count)) if self.count > 1 else 1.0


class RLHFPPO(LMAlgorithm):
    """PPO-RLHF on a causal LM with a reward model, a critic and a KL leash to the SFT model."""

    config: RLHFPPOConfig
    saved = ("model", "critic", "optimizer", "critic_optimizer", "rng", "generator")
    eval_at_end = True

    @property
    def eval_at_start(self) -> bool:  # type: ignore[override]
        """The start of the curve, where anything evaluates (a payoff train run always)."""
        return self.config.eval_every > 0 or self.config.final_eval

    def setup(self) -> None:
        config = self.config
        model_config = self.setup_lm(preference_base(config.task, config.base, config.device))
        self.generator = torch.Generator().manual_seed(config.seed)
        self.reference = FrozenReference(self.model)
        self.critic = build_scalar_model(model_config, seed=config.seed + 1, device=self.device)
        self.proxy_eval: dict[str, Any] = {}
        self.reward_model: Any
        if config.reward_model:
            self.reward_model = RewardModelScorer.from_path(config.reward_model, self.device)
        elif config.rewards:
            self.reward_model = RewardMix(config.rewards)
        else:  # the over-optimization setting: a proxy fit to biased labels, trained here
            self.reward_model, result = train_proxy(model_config, config)
            self.proxy_eval = result.to_dict()
        # A reward model or judge can be talked to: watch for completions that try.
        self.judge_addressing = JudgeAddressing() if is_model_scored(self.reward_model) else None
        self.sampler = LocalSampler(self.model, self.tokenizer)
        self.optimizer = adamw(self.model.parameters(), config.learning_rate, config.weight_decay)
        self.critic_optimizer = adamw(
            self.critic.parameters(), config.critic_learning_rate, config.weight_decay
        )
        self.kl_controller = AdaptiveKLController(
            config.kl_coef, config.kl_target, config.kl_horizon
        )
        self.score_stats = RunningStd()
        self.step = 0

    def score(self, prompts: list[str], completions: list[str], rows: list[Any]) -> np.ndarray:
        """The reward being optimized: the reward model's score (or the reward functions' total)."""
        if isinstance(self.reward_model, RewardMix):
            return np.asarray(
                self.reward_model(prompts, completions, **columns_of(rows)).total, float
            )
        return np.asarray(self.reward_model(prompts, completions), float)

    def _disagreement(self) -> dict[str, float]:
        """Spread of a reward-model ensemble on this batch (the policy's own samples), if there is one."""
        if isinstance(self.reward_model, RewardModelScorer) and len(self.reward_model.models) > 1:
            return {"reward/disagreement": float(np.mean(self.reward_model.last_std))}
        return {}

    def critic_values(self, g: Any) -> torch.Tensor:
        """V(state before each completion token): [B, T]."""
        ids = torch.cat([g.prompt_ids, g.completion_ids], 1)
        mask = torch.cat([g.prompt_mask, g.completion_mask], 1)
        width = g.completion_ids.shape[1]
        return self.critic.token_values(ids, mask)[:, -width - 1 : -1]

    # ---- one step ---------------------------------------------------------------------
    def iterate(self) -> None:
        """One step: rollout, reward with the KL penalty, token-level GAE, PPO update."""
        config = self.config
        started = time.time()
        # 1. rollout
        rows = self.task.sample(self.rng, config.prompts_per_step)
        prompts = [r["prompt"] for r in rows]  # what the reward model and the verifier read
        sampling = SamplingConfig(config.temperature, 1.0, config.max_new_tokens)
        g = self.sampler.generate([self.prompt_text(r) for r in rows], sampling, self.generator)
        mask = g.completion_mask.float()  # [B, T], on the model's device
        # 2. reward: RM score on the last token, KL penalty on every token
        scores = self.score(prompts, g.completions, rows)
        gold = (  # prompt-only rows have no gold scorer
            self.verifier(prompts, g.completions, **columns_of(rows)).total
            if self.verifier is not None
            else None
        )
        args = (
            g.prompt_ids,
            g.prompt_mask,
            g.completion_ids,
            g.completion_mask,
            config.temperature,
        )
        old_logprobs = batched_completion_logprobs(self.model, *args)
        with self.reference.model() as reference:
            ref_logprobs = batched_completion_logprobs(reference, *args)
        with torch.no_grad():
            old_values = self.critic_values(g) * mask
        self.score_stats.update(scores)
        scale = self.score_stats.std if config.whiten_rewards else 1.0
        kl_tokens = (old_logprobs - ref_logprobs) * mask  # k1 per token: the InstructGPT penalty
        rewards = -self.kl_controller.coef * kl_tokens
        last = (g.completion_mask.sum(1) - 1).clamp(min=0)
        every_row = torch.arange(len(rows), device=self.device)
        rewards[every_row, last] += torch.as_tensor(
            scores / max(scale, 1e-8), dtype=rewards.dtype, device=self.device
        )
        # 3. token-level GAE, time first: a completion ends at its last token
        dones = torch.zeros_like(mask)
        dones[every_row, last] = 1.0
        dones = torch.maximum(dones, 1.0 - mask)
        no_bootstrap = torch.zeros(len(rows), device=self.device)
        advantages, returns = gae(
            rewards.T, old_values.T, no_bootstrap, dones.T, config.gamma, config.lam
        )
        advantages, returns = advantages.T, returns.T
        valid = mask.bool()
        adv_valid = advantages[valid]
        advantages = (advantages - adv_valid.mean()) / (adv_valid.std() + 1e-8)
        # 4. PPO update
        stats = self.update(g, valid, old_logprobs, old_values, advantages, returns)
        kl_per_completion = float(kl_tokens.sum(1).mean())
        self.kl_controller.update(kl_per_completion, len(rows))
        self.step += 1
        # The monitor runs every step, logged or not.
        integrity = (
            self.judge_addressing.check(self.step, g.completions, self.run)
            if self.judge_addressing is not None
            else {}
        )
        self._record = {
            "reward/proxy": float(scores.mean()),
            **({"reward/gold": float(np.mean(gold))} if gold is not None else {}),
            "train/kl": kl_per_completion,
            "train/sqrt_kl": float(np.sqrt(max(kl_per_completion, 0.0))),
            "train/kl_coef": self.kl_controller.coef,
            "train/completion_length": float(g.completion_mask.sum(1).float().mean()),
            "perf/samples_per_s": len(rows) / max(time.time() - started, 1e-9),
            **self._disagreement(),
            **integrity,
            **stats,
        }

    def progress_postfix(self) -> dict[str, Any]:
        return {"rm": self._record["reward/proxy"], "kl": self._record["train/kl"]}

    def default_monitors(self) -> list[Monitor]:
        """Reward-model score vs the gold scorer on the same samples, judge addressing, and
        completion-length drift (payoff.monitor.integrity)."""
        if not self.config.default_monitors:
            return []
        return lm_monitors(
            proxy="reward/proxy",
            truth="reward/gold" if self.verifier is not None else None,
            code_rewards=[],
            canaries=None,
            model_scored=self.judge_addressing is not None,
            format_drift=None,
        )

    def update(
        self,
        g: Any,
        valid: torch.Tensor,
        old_logprobs: torch.Tensor,
        old_values: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
    ) -> dict[str, float]:
        """ppo_epochs passes of minibatch steps on the clipped policy and value losses."""
        config = self.config
        batch = g.prompt_ids.shape[0]
        logs: dict[str, list[float]] = {
            k: [] for k in ("policy_loss", "value_loss", "approx_kl", "clip_fraction", "entropy")
        }
        self.model.train()
        self.critic.train()
        for _ in range(config.ppo_epochs):
            order = torch.randperm(batch, generator=self.generator)
            for start in range(0, batch, config.minibatch_size):
                i = order[start : start + config.minibatch_size]
                m = valid[i]
                out = completion_logprobs(
                    self.model,
                    g.prompt_ids[i],
                    g.prompt_mask[i],
                    g.completion_ids[i],
                    g.completion_mask[i],
                    config.temperature,
                    with_entropy=True,
                )
                surrogate = clipped_surrogate(
                    out.logprobs[m], old_logprobs[i][m], advantages[i][m], config.clip
                )
                train_step(
                    surrogate.loss, self.optimizer, self.model.parameters(), config.max_grad_norm
                )
                values = self.critic.token_values(
                    torch.cat([g.prompt_ids[i], g.completion_ids[i]], 1),
                    torch.cat([g.prompt_mask[i], g.completion_mask[i]], 1),
                )[:, -g.completion_ids.shape[1] - 1 : -1]
                v_loss = config.value_coef * value_loss(
                    values[m], returns[i][m], old_values[i][m], config.value_clip
                )
                train_step(
                    v_loss, self.critic_optimizer, self.critic.parameters(), config.max_grad_norm
                )
                logs["policy_loss"].append(surrogate.loss.item())
                logs["value_loss"].append(v_loss.item())
                logs["approx_kl"].append(float(surrogate.approx_kl))
                logs["clip_fraction"].append(float(surrogate.clip_fraction))
                assert out.entropy is not None
                logs["entropy"].append(float(out.entropy[m].mean()))
        return {f"train/{k}": float(np.mean(v)) for k, v in logs.items()}

    def reward_without_reference(self) -> RewardMix | None:
        """Prompt-only rows: `evaluate` scores by the reward functions given as `rewards`
        (a reward model's scores are eval/proxy on the curve)."""
        return self.reward_model if isinstance(self.reward_model, RewardMix) else None

    def greedy_scores(self) -> tuple[float, float | None]:
        """(proxy, gold) mean scores of greedy answers on held-out prompts (gold None for
        prompt-only rows)."""
        rows = self.task.split("test", self.config.task.eval_size)
        prompts = [r["prompt"] for r in rows]
        sampling = SamplingConfig(temperature=0.0, max_new_tokens=self.config.max_new_tokens)
        completions = self.sampler.generate(
            [self.prompt_text(r) for r in rows], sampling
        ).completions
        proxy = float(np.mean(self.score(prompts, completions, rows)))
        if self.verifier is None:
            return proxy, None
        gold = float(np.mean(self.verifier(prompts, completions, **columns_of(rows)).total))
        return proxy, gold

    def evaluate_now(self) -> None:
        proxy, gold = self.greedy_scores()
        self.log(
            self.step, **{"eval/proxy": proxy, **({} if gold is None else {"eval/gold": gold})}
        )

    def finish(self) -> None:
        if not self.config.final_eval:
            self.export_model()
            if self.run is not None:
                self.run.write_summary(
                    final_line=NO_FINAL_LM_EVALUATION,
                    steps=self.step,
                    model_dir=str(self.run.path / "model"),
                    base_model=self.base_model_path,
                )
            return
        proxy, gold = self.greedy_scores()
        key = "eval/proxy" if gold is None else "eval/gold"
        start = self.first_logged(key)  # from the run's file: a resume starts mid-way
        self.export_model()
        line = (
            f"greedy held-out {'reward-model score' if gold is None else 'gold score'} "
            f"{proxy if gold is None else gold:.3f} "
            f"(start {start[key] if start else float('nan'):.3f})"
            + (" (prompt-only rows: no gold scorer)" if gold is None else f", proxy {proxy:.3f}")
        )
        if self.run is not None:
            self.run.write_summary(
                final_eval={"gold": gold, "proxy": proxy},
                final_line=line,
                steps=self.step,
                model_dir=str(self.run.path / "model"),
                base_model=self.base_model_path,
            )

    def evaluate(
        self,
        episodes: int = 0,
        seed: int | None = None,
        split: str = "test",
        k: Sequence[int] = (),
        temperature: float = 1.0,
    ) -> LMEvalResult:
        """Greedy accuracy on `episodes` held-out problems (0: config.task.eval_size); no
        pass@k unless `k` asks for it."""
        return super().evaluate(
            episodes or self.config.task.eval_size, seed, split=split, k=k, temperature=temperature
        )

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "kl_coef": self.kl_controller.coef,
            "score_stats": dict(self.score_stats.__dict__),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.kl_controller.coef = float(state["kl_coef"])
        self.score_stats.__dict__.update(state["score_stats"])


ALGORITHM = RLHFPPO
