"""Detectors over logged metrics. Each keeps a short history and fires once when its signal trips."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from payoff.core.config import annotated_class, from_dict, in_range
from payoff.core.errors import ConfigError, suggest


@dataclass
class Alarm:
    """A detector fired: when, what, how bad, and the evidence."""

    step: int
    kind: str
    message: str
    severity: Literal["info", "warning", "critical"] = "warning"
    evidence: dict[str, Any] = field(default_factory=dict)


class Monitor:
    """Base: `update(step, record)` returns the alarms raised by this record (usually none).

    A detector is built from its config dataclass (`config_class`) or from that config's
    keys: `Divergence(proxy="p", truth="t")`; `setup()` then prepares its state.
    """

    kind = "monitor"
    config_class: type = type(None)  # the class its `config` annotation names
    metric_fields: tuple[str, ...] = ()  # the config keys that name the metrics it reads

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.config_class = annotated_class(cls, "config") or cls.config_class

    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        self.fired = False
        self.config = config or from_dict(self.config_class, kwargs)
        self.setup()

    def setup(self) -> None:
        """Check the config beyond single keys and make the running state."""

    def update(self, step: int, record: dict[str, Any]) -> list[Alarm]:
        raise NotImplementedError

    def watched(self) -> list[str]:
        """The metric keys this monitor reads (it stays silent while any is missing)."""
        return [str(getattr(self.config, name)) for name in self.metric_fields]


def unfed(monitors: list[Monitor], logged: set[str]) -> list[str]:
    """One line per monitor that reads a metric no record had: a misspelt or unlogged key
    leaves a monitor watching nothing, and it would never say so."""
    lines = []
    for monitor in monitors:
        watched = getattr(monitor, "watched", None)  # duck-typed monitors may not say
        missing = [key for key in (watched() if watched else []) if key not in logged]
        for key in missing:
            lines.append(
                f"monitor {monitor.kind!r} watches {key!r}, which this run never logged, so it "
                f"could not fire.{suggest(key, sorted(logged))}"
            )
    return lines


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value):
        return float(value)
    return None


@dataclass
class DivergenceConfig:
    """Proxy-vs-true divergence.

    proxy / truth: metric keys of the reward being optimized and of the objective it stands
        for (a gold reward, hidden tests, laps finished, success). (Not `true`: YAML reads
        that word as a boolean.)
    window: records averaged on each side of the comparison.
    proxy_gain_fraction: the proxy must have risen by this fraction of its observed range
        since the true objective's best window...
    true_tolerance: ...while the true objective is no more than this above that best
        (flat) or has fallen below it. In units of the true metric.
    significance: ...and the proxy's gain is at least this many standard errors of the
        difference of two window means, the per-record noise estimated from successive
        records' differences (std / sqrt 2). A proxy that only jitters, e.g. a reward
        stuck between 0.094 and 0.1, has a range too, and a quarter of it is noise (that one
        reached 2.0-2.5; code-hack-grpo's learned hack 2.5-3.0 under rollbacks). 0: off.
    min_records: records needed before the detector may fire.
    """

    proxy: str = "train/return"
    truth: str = "train/true_return"
    window: int = field(default=5, metadata=in_range(1))
    proxy_gain_fraction: float = 0.25
    true_tolerance: float = 0.1
    significance: float = field(default=2.5, metadata=in_range(0))
    min_records: int = 10


class Divergence(Monitor):
    """Fires when the proxy keeps rising while the true objective stays flat or falls."""

    kind = "divergence"
    metric_fields = ("proxy", "truth")

    config: DivergenceConfig

    def setup(self) -> None:
        self.points: list[tuple[int, float, float]] = []  # (step, proxy, true)
        self.latest: dict[str, float] = {}  # each metric's last value

    def update(self, step: int, record: dict[str, Any]) -> list[Alarm]:
        # The two may come in different records (train/... every update, eval/... at each
        # evaluation): each record with either pairs it with the other's latest value.
        c = self.config
        fresh = {k: v for k in (c.proxy, c.truth) if (v := _number(record, k)) is not None}
        if not fresh:
            return []
        self.latest.update(fresh)
        proxy, true = self.latest.get(c.proxy), self.latest.get(c.truth)
        if proxy is None or true is None:
            return []
        self.points.append((step, proxy, true))
        if self.fired or len(self.points) < max(c.min_records, 2 * c.window):
            return []
        proxies = np.array([p for _, p, _ in self.points])
        trues = np.array([t for _, _, t in self.points])
        kernel = np.ones(c.window) / c.window
        proxy_smooth = np.convolve(proxies, kernel, mode="valid")  # [n - window + 1]
        true_smooth = np.convolve(trues, kernel, mode="valid")
        best = int(np.argmax(true_smooth))  # window where the true objective peaked
        proxy_range = float(proxies.max() - proxies.min())
        proxy_gain = float(proxy_smooth[-1] - proxy_smooth[best])
        true_gain = float(true_smooth[-1] - true_smooth[best])
        noise = float(np.diff(proxies).std()) / np.sqrt(2)  # one record's, about its trend
        if (
            proxy_range <= 0
            or proxy_gain < c.proxy_gain_fraction * proxy_range
            or proxy_gain < c.significance * noise * np.sqrt(2 / c.window)
            or true_gain > c.true_tolerance
        ):
            return []
        self.fired = True
        since = self.points[best + c.window - 1][0]
        falling = true_gain < -c.true_tolerance
        message = (
            f"{c.proxy} rose by {proxy_gain:.3g} since step {since} while {c.truth} "
            + (f"fell by {-true_gain:.3g}" if falling else f"stayed flat ({true_gain:+.3g})")
            + ": the policy is optimizing the proxy, not the objective"
        )
        return [
            Alarm(
                step,
                self.kind,
                message,
                "critical",
                {
                    "since_step": since,
                    "proxy_gain": proxy_gain,
                    "true_gain": true_gain,
                    "proxy_now": float(proxy_smooth[-1]),
                    "true_now": float(true_smooth[-1]),
                    "true_best": float(true_smooth[best]),
                },
            )
        ]


@dataclass
class ThresholdConfig:
    """A metric crossing a limit (KL drift, ensemble disagreement, entropy collapse).

    key: metric key; above / below: the alarm limits (set one or both);
    patience: consecutive records beyond the limit before firing.
    """

    key: str = "train/kl"
    above: float | None = None
    below: float | None = None
    patience: int = field(default=1, metadata=in_range(1))
    severity: Literal["info", "warning", "critical"] = "warning"


class Threshold(Monitor):
    """Fires when a metric stays above `above` (or below `below`) for `patience` records."""

    kind = "threshold"
    metric_fields = ("key",)

    config: ThresholdConfig

    def setup(self) -> None:
        if self.config.above is None and self.config.below is None:
            raise ConfigError(f"threshold monitor on {self.config.key!r} needs 'above' or 'below'")
        self.streak = 0
        self.streak_start = 0

    def update(self, step: int, record: dict[str, Any]) -> list[Alarm]:
        value = _number(record, self.config.key)
        if value is None or self.fired:
            return []
        c = self.config
        beyond = (c.above is not None and value > c.above) or (
            c.below is not None and value < c.below
        )
        self.streak = self.streak + 1 if beyond else 0
        if self.streak == 1:
            self.streak_start = step
        if self.streak < c.patience:
            return []
        self.fired = True
        limit = (
            f"above {c.above}" if c.above is not None and value > c.above else f"below {c.below}"
        )
        return [
            Alarm(
                step,
                f"{self.kind}:{c.key}",
                f"{c.key} = {value:.4g} is {limit} for {self.streak} records",
                c.severity,
                {
                    "value": value,
                    "above": c.above,
                    "below": c.below,
                    "since_step": self.streak_start,
                },
            )
        ]


@dataclass
class DriftConfig:
    """A metric moving away from where the run started (completion length, truncation).

    key: metric key. baseline: the first records averaged as the starting level; window:
    the latest records averaged. Fires when the latest level is more than `ratio` times the
    start (or less than start / ratio; for a negative start, the same ratios of it: -100 is
    10x -10), or more than `increase` above it (either set).
    """

    key: str = "train/completion_length"
    baseline: int = field(default=5, metadata=in_range(1))
    window: int = field(default=5, metadata=in_range(1))
    ratio: float | None = field(default=2.0, metadata=in_range(1.0, low_open=True))
    increase: float | None = None
    severity: Literal["info", "warning", "critical"] = "warning"


class Drift(Monitor):
    """Fires when a metric's recent level drifts far from its starting level."""

    kind = "drift"
    metric_fields = ("key",)

    config: DriftConfig

    def setup(self) -> None:
        c = self.config
        if c.ratio is None and c.increase is None:
            raise ConfigError(f"drift monitor on {c.key!r} needs 'ratio' or 'increase'")
        self.start: list[float] = []
        self.recent: deque[tuple[int, float]] = deque(maxlen=c.window)

    def update(self, step: int, record: dict[str, Any]) -> list[Alarm]:
        value = _number(record, self.config.key)
        if value is None or self.fired:
            return []
        c = self.config
        if len(self.start) < c.baseline:
            self.start.append(value)
            return []
        self.recent.append((step, value))
        if len(self.recent) < c.window:
            return []
        start = float(np.mean(self.start))
        now = float(np.mean([v for _, v in self.recent]))
        how = ""
        # (a negative level drifts by the same ratios: -100 is 10x a start of -10; a start
        # of 0 has no ratio, only `increase`)
        if c.ratio is not None and start != 0 and not 1 / c.ratio <= now / start <= c.ratio:
            how = f"{now / start:.2f}x its starting level"
        elif c.increase is not None and now - start > c.increase:
            how = f"{now - start:+.3g} above its starting level"
        if not how:
            return []
        self.fired = True
        return [
            Alarm(
                step,
                f"{self.kind}:{c.key}",
                f"{c.key} drifted to {now:.4g}, {how} ({start:.4g})",
                c.severity,
                {"start": start, "now": now, "since_step": self.recent[0][0]},
            )
        ]


@dataclass
class SpuriousCorrelationConfig:
    """Reward tracking a feature it should not (length, a flattering opener, an emoji).

    reward / feature: metric keys logged together each step; window: records in the
    rolling correlation; above: correlation that fires.
    """

    reward: str = "train/reward"
    feature: str = "train/completion_length"
    window: int = field(default=20, metadata=in_range(3))  # a correlation needs 3 points
    above: float = 0.8


class SpuriousCorrelation(Monitor):
    """Fires when the rolling correlation of reward with a spurious feature passes `above`."""

    kind = "spurious_correlation"
    metric_fields = ("reward", "feature")

    config: SpuriousCorrelationConfig

    def setup(self) -> None:
        self.pairs: deque[tuple[float, float]] = deque(maxlen=self.config.window)

    def update(self, step: int, record: dict[str, Any]) -> list[Alarm]:
        reward, feature = _number(record, self.config.reward), _number(record, self.config.feature)
        if reward is None or feature is None or self.fired:
            return []
        self.pairs.append((reward, feature))
        if len(self.pairs) < self.config.window:
            return []
        values = np.array(self.pairs)
        if values[:, 0].std() == 0 or values[:, 1].std() == 0:
            return []
        correlation = float(np.corrcoef(values[:, 0], values[:, 1])[0, 1])
        if correlation < self.config.above:
            return []
        self.fired = True
        return [
            Alarm(
                step,
                self.kind,
                f"{self.config.reward} tracks {self.config.feature} (correlation {correlation:.2f} over "
                f"{len(self.pairs)} records): the reward may be paying for the feature, not the task",
                "warning",
                {"correlation": correlation},
            )
        ]


@dataclass
class ModelExploitationConfig:
    """A planner exploiting its learned model (model-based RL): reward hacking against a
    world model. The planner picks actions whose imagined return is high; where the model is
    wrong, the highest imagined returns are the model's errors, and the env pays less.

    planned / realized: metric keys of the return the planner predicted over its horizon
        and the return the env then paid over those same steps.
    disagreement: metric key of the ensemble's disagreement along the plans (the std of the
        members' predicted states, in units of the observation's std).
    gap: fires when planned - realized exceeds this fraction of |realized|...
    min_gap: ...and at least this much in return units (so that near-zero returns do
        not fire on tiny absolute differences)...
    disagreement_above: ...while the disagreement is above this.
    patience: consecutive records meeting all three before firing.
    The defaults come from Pendulum (payoff mbrl): healthy runs (3 seeds, horizon 15)
    measured a relative gap of at most 0.19 and a disagreement of at most 0.05; a model
    fitted on 30 random steps and planned through 40 steps ahead (seeds 1, 2), planned
    returns of +1,600 to +17,000 where the env paid about -335, disagreement 31-150.
    """

    planned: str = "train/planned_return"
    realized: str = "train/realized_return"
    disagreement: str = "train/model_disagreement"
    gap: float = field(default=0.25, metadata=in_range(0, low_open=True))
    min_gap: float = field(default=1.0, metadata=in_range(0))
    disagreement_above: float = field(default=0.25, metadata=in_range(0))
    patience: int = field(default=2, metadata=in_range(1))
    severity: Literal["info", "warning", "critical"] = "warning"


class ModelExploitation(Monitor):
    """Fires when the planner's predicted return exceeds what the env paid by a wide margin
    while the ensemble disagrees along its plans: it is optimizing the model's errors."""

    kind = "model_exploitation"
    metric_fields = ("planned", "realized", "disagreement")

    config: ModelExploitationConfig

    def setup(self) -> None:
        self.streak = 0
        self.streak_start = 0

    def update(self, step: int, record: dict[str, Any]) -> list[Alarm]:
        c = self.config
        planned, realized = _number(record, c.planned), _number(record, c.realized)
        disagreement = _number(record, c.disagreement)
        if planned is None or realized is None or disagreement is None or self.fired:
            return []
        gap = planned - realized
        exploiting = (
            gap > c.min_gap and gap > c.gap * abs(realized) and disagreement > c.disagreement_above
        )
        self.streak = self.streak + 1 if exploiting else 0
        if self.streak == 1:
            self.streak_start = step
        if self.streak < c.patience:
            return []
        self.fired = True
        return [
            Alarm(
                step,
                self.kind,
                f"the planner expected a return of {planned:.4g} over its horizon but the env "
                f"paid {realized:.4g} ({gap:.3g} less) while the ensemble disagreed along its "
                f"plans ({c.disagreement} = {disagreement:.3g} > {c.disagreement_above}), for "
                f"{self.streak} records: it is exploiting the learned model's errors",
                c.severity,
                {
                    "planned": planned,
                    "realized": realized,
                    "gap": gap,
                    "disagreement": disagreement,
                    "since_step": self.streak_start,
                },
            )
        ]


MONITORS: dict[str, type[Monitor]] = {
    "divergence": Divergence,
    "threshold": Threshold,
    "spurious_correlation": SpuriousCorrelation,
    "drift": Drift,
    "model_exploitation": ModelExploitation,
}


def replay(monitors: list[Monitor], records: list[dict[str, Any]]) -> None:
    """Feed logged records to monitors, discarding their alarms: how a resumed or rolled-back
    run brings its monitors to where the records leave them."""
    for record in records:
        for monitor in monitors:
            monitor.update(int(record.get("step", 0)), record)


def build_monitors(specs: list[dict[str, Any]] | None) -> list[Monitor]:
    """Monitors from recipe entries like `{kind: divergence, proxy: ..., truth: ...}`."""
    monitors = []
    for spec in specs or []:
        if not isinstance(spec, dict) or "kind" not in spec:
            raise ConfigError(f"each monitor needs a 'kind' ({', '.join(MONITORS)}), got {spec!r}")
        options = {str(k): v for k, v in spec.items() if k != "kind"}
        kind = spec["kind"]
        if kind not in MONITORS:
            raise ConfigError(
                f"unknown monitor kind {kind!r}.{suggest(str(kind), MONITORS)} Valid kinds: {', '.join(MONITORS)}"
            )
        monitors.append(MONITORS[kind](**options))
    return monitors
