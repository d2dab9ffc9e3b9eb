"""Best-of-N sampling against a reward model, and the over-optimization curve it traces.

Best-of-N is the cheapest way to optimize a reward at inference time: sample N completions,
keep the one the reward model likes best. Its distance from the policy is known in closed
form (Stiennon et al. 2020; Gao et al. 2022, https://arxiv.org/abs/2210.10760):

    KL(best-of-N || policy) = log N - (N - 1) / N

so sweeping N sweeps the optimization pressure. Optimizing a *proxy* reward model (fit to a
limited set of biased labels) and scoring the same picks with the *gold* scorer reproduces
the over-optimization shape: the proxy score keeps rising with sqrt(KL) while gold peaks and
falls. This module samples N_max completions per prompt once and computes, for every
N <= N_max, the exact expected proxy and gold score of best-of-N over random N-subsets
(an unbiased estimator, no resampling noise from the sweep itself).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from payoff.algos.loop import TrainLoop
from payoff.algos.reward_model import (
    preference_base,
    proxy_preferences,
    small_base,
    styled_task,
    train_proxy,
)
from payoff.algos.shared.lm import LMAlgorithm, LMEvalResult, columns_of, correctness_spec
from payoff.core.config import (
    MAX_PROMPTS,
    MAX_SEED,
    MAX_THREADS,
    MAX_TOKENS,
    absolute_path,
    in_range,
)
from payoff.core.device import check_device_name
from payoff.core.errors import ConfigError
from payoff.envs.tasks import TaskConfig
from payoff.envs.tasks.preferences import PreferenceDataConfig
from payoff.models.base_model import BaseModelConfig
from payoff.models.lm import ModelConfig
from payoff.monitor.detectors import Divergence, Monitor
from payoff.monitor.integrity import MonitorKeys
from payoff.monitor.judge_addressing import JudgeAddressing
from payoff.rewards.base import RewardMix
from payoff.rewards.learned import RewardModelScorer
from payoff.rollout.generation import LocalSampler, SamplingConfig


def bon_kl(n: int) -> float:
    """KL(best-of-n || policy) in nats: log n - (n - 1) / n."""
    return math.log(n) - (n - 1) / n


def best_of_n_weights(m: int, n: int) -> np.ndarray:
    """P(the i-th smallest of m samples is the largest of a random n-subset), i = 1..m: C(i-1, n-1) / C(m, n)."""
    total = math.comb(m, n)
    return np.array([math.comb(i - 1, n - 1) / total for i in range(1, m + 1)])


def expected_best_of_n(proxy: np.ndarray, values: np.ndarray, n: int) -> float:
    """E[values of the proxy's pick among n of these m samples], averaged over random n-subsets."""
    order = np.argsort(proxy, kind="stable")
    return float(best_of_n_weights(len(proxy), n) @ values[order])


def best_of_n(
    sampler: LocalSampler,
    scorer: Any,
    prompts: Sequence[str],
    n: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    model_prompts: Sequence[str] | None = None,
) -> list[str]:
    """For each prompt, the completion `scorer` rates highest among `n` samples.

    model_prompts: the prompts as the model reads them (through a chat template), when
    they differ from what the scorer reads.
    """
    repeated = [p for p in prompts for _ in range(n)]
    shown = repeated if model_prompts is None else [p for p in model_prompts for _ in range(n)]
    completions = sampler.generate(shown, sampling, generator).completions
    scores = np.asarray(scorer(repeated, completions), float).reshape(len(prompts), n)
    return [completions[i * n + int(j)] for i, j in enumerate(scores.argmax(1))]


@dataclass
class BestOfNConfig(MonitorKeys):
    """Best-of-N sweep: proxy and gold score of the proxy's pick as N grows.

    model: the policy that samples (model.path, or empty = the tiny SFT base model for `task`).
    base / task: as for the other preference algorithms (styled_addition has a gold scorer).
    reward_model: a trained reward model folder (RUN/reward_model or one member_k). Empty =
        train a proxy here first, on `proxy_preferences` labels for `proxy_steps` steps.
    proxy_preferences: the proxy's training pairs. A biased rater (bias > 0) plus few pairs
        is what makes the proxy exploitable; bias 0 gives a proxy that mostly tracks gold.
    proxy_steps / proxy_learning_rate: reward-model training when it is trained here.
    ns: the N values of the sweep (each <= max(ns) = samples drawn per prompt).
    prompts: held-out prompts to sample for.
    temperature / max_new_tokens: sampling.
    seed / threads / device: as every LM trainer's (payoff.algos.shared.lm.LMKeys); device
        auto = a GPU when torch sees one. The policy and the reward model live there.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    base: BaseModelConfig = field(default_factory=small_base)
    task: TaskConfig = field(default_factory=styled_task)
    reward_model: str = ""
    proxy_preferences: PreferenceDataConfig = field(default_factory=proxy_preferences)
    proxy_steps: int = field(default=300, metadata=in_range(0, low_open=True))
    proxy_learning_rate: float = field(default=2e-3, metadata=in_range(0, low_open=True))
    seed: int = field(default=0, metadata=in_range(0, MAX_SEED))
    ns: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256], metadata=in_range(1)
    )
    prompts: int = field(default=32, metadata=in_range(0, low_open=True, most=MAX_PROMPTS))
    temperature: float = field(default=1.0, metadata=in_range(0, low_open=True))
    max_new_tokens: int = field(default=24, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    threads: int = field(default=1, metadata=in_range(1, MAX_THREADS))
    device: str = field(default="auto", metadata={"check": check_device_name})

    def __post_init__(self) -> None:
        self.reward_model = absolute_path(self.reward_model)  # saved absolute: found anywhere

    def validate(self) -> None:
        if not self.ns or min(self.ns) < 1:
            raise ConfigError(f"config key 'ns' must be a list of N >= 1, got {self.ns}")
        if self.prompts <= 0 or self.temperature <= 0:
            raise ConfigError(
                f"need prompts > 0 and temperature > 0 (best-of-N of greedy samples is one sample), "
                f"got {self.prompts} and {self.temperature}"
            )


class BestOfN(LMAlgorithm):
    """Sweep N for best-of-N against a proxy reward model; log proxy, gold and sqrt(KL)."""

    config: BestOfNConfig
    saved = ("sweep",)

    def setup(self) -> None:
        config = self.config
        self.model_config = self.setup_lm(preference_base(config.task, config.base, config.device))
        if not self.task.has_references:
            raise ConfigError(
                f"best-of-N measures the proxy's pick against the task's gold scorer, and the "
                f"prompt-only rows of task {config.task.name!r} have none: give rows with "
                f"answers (or the styled_addition task)"
            )
        self.gold = RewardMix([correctness_spec(self.task)])
        self.scorer: RewardModelScorer | None = None
        self.proxy_eval: dict[str, Any] = {}
        self.sweep: list[dict[str, float]] = []

    def proxy(self) -> RewardModelScorer:
        """The reward model being optimized: loaded, or trained here on biased labels."""
        if self.scorer is None:
            config = self.config
            if config.reward_model:
                self.scorer = RewardModelScorer.from_path(config.reward_model, self.device)
            else:
                self.scorer, result = train_proxy(self.model_config, config)
                self.proxy_eval = result.to_dict()
        return self.scorer

    def learn(self, total: int | None = None, callback: Any = None, **sb3: Any) -> BestOfN:
        """Sample max(ns) completions per prompt once, then log best-of-N for every N.

        The sweep is the loop: one N per iteration, in increasing order; `total` caps how
        many Ns (default: all of them). callback, progress_bar and a stop signal: as
        Algorithm.learn's.
        """
        config = self.config
        total, options = self.learn_arguments(total, callback, sb3)
        total = len(config.ns) if total is None else min(total, len(config.ns))
        self.interrupted = False
        self.sample()
        TrainLoop(
            self,
            total,
            desc="best-of-N sweep",
            unit="N",
            **options,
        ).run()
        if self.interrupted:
            raise self._interruption(total)
        return self

    def sample(self) -> None:
        """Draw max(ns) completions per test prompt; score them by proxy, gold and length."""
        config = self.config
        scorer = self.proxy()
        rows = self.task.split("test", config.prompts)
        n_max = max(config.ns)
        repeated = [row for row in rows for _ in range(n_max)]
        prompts = [r["prompt"] for r in repeated]  # what the scorers read
        sampling = SamplingConfig(config.temperature, 1.0, config.max_new_tokens)
        generator = torch.Generator().manual_seed(config.seed)
        completions = (
            LocalSampler(self.model, self.tokenizer)
            .generate([self.prompt_text(r) for r in repeated], sampling, generator)
            .completions
        )
        shape = (len(rows), n_max)
        proxy = np.asarray(scorer(prompts, completions), float).reshape(shape)
        gold = np.asarray(
            self.gold(prompts, completions, **columns_of(repeated)).total, float
        ).reshape(shape)
        # Completions that address the reward model, and how often best-of-N picks them.
        monitor = JudgeAddressing()
        monitor.check(self.step, completions, self.run)
        self.samples = {"completions": completions, "proxy": proxy, "gold": gold}
        self._picked = {  # what the proxy's pick is measured by: [prompts, n_max] each
            "bon/proxy": proxy,
            "bon/gold": gold,
            "bon/length": np.array([len(c) for c in completions], float).reshape(shape),
            monitor.key: np.array(monitor.last_flags, float).reshape(shape),
        }

    def iterate(self) -> None:
        """The expected proxy, gold, length and judge-addressing of best-of-N at the next N."""
        n = sorted(self.config.ns)[self.step]
        proxy = self._picked["bon/proxy"]
        point = {"bon/n": float(n), "bon/kl": bon_kl(n), "bon/sqrt_kl": math.sqrt(bon_kl(n))}
        for key, values in self._picked.items():
            point[key] = float(
                np.mean([expected_best_of_n(p, v, n) for p, v in zip(proxy, values, strict=True)])
            )
        self.step += 1
        self.sweep.append(point)

    def progress_postfix(self) -> dict[str, Any]:
        return {"gold": self.sweep[-1]["bon/gold"]}

    def default_monitors(self) -> list[Monitor]:
        """The proxy's pick scored by the gold scorer as N grows: proxy up while gold is flat
        or falls is over-optimization (one record per N, so short windows)."""
        if not self.config.default_monitors:
            return []
        return [
            Divergence(
                proxy="bon/proxy", truth="bon/gold", window=2, min_records=4, true_tolerance=0.02
            )
        ]

    def log_training(self) -> None:
        self.log(self.step, **self.sweep[-1])

    def evaluate_now(self) -> None:
        """A best-of-N run is its own evaluation: every N's point is logged."""

    def finish(self) -> None:
        if not self.sweep:
            return
        best = max(self.sweep, key=lambda p: p["bon/gold"])
        last = self.sweep[-1]
        line = (
            f"best-of-N: gold peaks at N={best['bon/n']:.0f} ({best['bon/gold']:.3f}, sqrt KL {best['bon/sqrt_kl']:.2f}); "
            f"at N={last['bon/n']:.0f} proxy {last['bon/proxy']:.2f} vs {self.sweep[0]['bon/proxy']:.2f} at N=1, "
            f"gold {last['bon/gold']:.3f} vs {self.sweep[0]['bon/gold']:.3f}"
        )
        if self.run is not None:
            self.run.write_summary(
                final_eval={"sweep": self.sweep, "proxy_reward_model": self.proxy_eval},
                final_line=line,
                steps=self.step,
                alarms=[dataclasses.asdict(a) for a in self.alarms],
            )
        self.final_line = line

    def evaluate(self, *args: Any, **kwargs: Any) -> LMEvalResult:
        """Not this run's measure: its model is the untrained base, and best-of-N's result
        is the sweep over N, in its metrics and summary."""
        raise ConfigError("a best-of-N run is its own evaluation: see its metrics and summary")

    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """Best-of-max(ns) completion(s) under the proxy reward model."""
        prompts = [observation] if isinstance(observation, str) else list(observation)
        sampling = SamplingConfig(self.config.temperature, 1.0, self.config.max_new_tokens)
        picks = best_of_n(
            LocalSampler(self.model, self.tokenizer),
            self.proxy(),
            prompts,
            max(self.config.ns),
            sampling,
            model_prompts=[self.prompt_text({"prompt": p}) for p in prompts],
        )
        return picks[0] if isinstance(observation, str) else picks


ALGORITHM = BestOfN
