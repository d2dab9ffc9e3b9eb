"""Pictures of language-model RL runs: accuracy and completion length over training (R1's
figure), and an agent's held-out success and tool calls per task kind."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from payoff.report.plots import plt, save_figure, series
from payoff.track.run import Run


def _smooth(values: np.ndarray, window: int = 10) -> np.ndarray:
    if len(values) < window:
        return values
    kernel = np.ones(window) / window
    return np.convolve(np.pad(values, (window - 1, 0), mode="edge"), kernel, mode="valid")


def plot_lm_training(run: Run, path: str | Path, title: str | None = None) -> Path:
    """Left: train accuracy (smoothed) and held-out greedy accuracy (for prompt-only rows,
    which have no accuracy: the reward); right: completion length."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    measure = "accuracy" if len(series(run, "train/accuracy")[0]) else "reward"
    xs, ys = series(run, f"train/{measure}")
    if len(xs):
        left.plot(xs, ys, color="C0", alpha=0.25)
        left.plot(xs, _smooth(ys), color="C0", label="train (sampled, smoothed)")
    xs, ys = series(run, f"eval/{measure}")
    if len(xs):
        left.plot(xs, ys, "o-", color="C3", label="held-out test (greedy)")
    left.set_xlabel("step")
    left.set_ylabel(measure if measure == "accuracy" else "reward (prompt-only rows)")
    if measure == "accuracy":
        left.set_ylim(-0.02, 1.02)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    xs, ys = series(run, "train/completion_length")
    if len(xs):
        right.plot(xs, _smooth(ys), color="C2", label="mean (smoothed)")
    xs, ys = series(run, "train/completion_length_max")
    if len(xs):
        right.plot(xs, ys, color="C2", alpha=0.3, label="max")
    right.set_xlabel("step")
    right.set_ylabel("completion length (tokens)")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(title or run.name)
    return save_figure(fig, path)


def plot_agent_training(run: Run, path: Path) -> Path:
    """Held-out success and tool calls per episode, per task kind (hard/easy, hops), over training."""
    records = [r for r in run.records() if "eval/success" in r]
    steps = [r["step"] for r in records]
    # the task's kinds, as evaluate_agent logged them (calculator: hard/easy; doc-search: hops)
    kinds = sorted(
        {
            k.removeprefix("eval/success_")
            for r in records
            for k in r
            if k.startswith("eval/success_")
        },
        reverse=True,
    )
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    axes[0].plot(steps, [r["eval/success"] for r in records], "k--", marker=".", label="all")
    for kind in kinds:
        axes[0].plot(
            steps, [r.get(f"eval/success_{kind}", np.nan) for r in records], marker="o", label=kind
        )
        axes[1].plot(
            steps,
            [r.get(f"eval/tool_calls_{kind}", np.nan) for r in records],
            marker="o",
            label=kind,
        )
    axes[0].set(title="held-out success (greedy)", xlabel="step", ylim=(-0.05, 1.05))
    axes[1].set(title="tool calls per episode", xlabel="step")
    axes[1].set_ylim(bottom=-0.05)
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def has_integrity_story(run: Run) -> bool:
    """Whether a GRPO run paid something other than its verifier, or planted canaries."""
    return any(
        r.get("integrity/proxy_only") or "integrity/canary_passes" in r for r in run.records()
    )


def plot_integrity(runs: list[Run], labels: list[str], path: str | Path, title: str = "") -> Path:
    """Left: the paid reward and the task's verifier on the same samples (smoothed), per
    run; right: the share paid but failing the verifier, and canary pass rates. Alarms are
    vertical lines in each run's colour (canary dash-dot, others dashed, rollbacks dotted)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        color = f"C{i % 10}"
        xs, ys = series(run, "train/reward")
        if len(xs):
            left.plot(xs, _smooth(ys), color=color, label=f"{label}: reward paid (proxy)")
        xs, ys = series(run, "train/accuracy")
        if len(xs):
            left.plot(
                xs, _smooth(ys), color=color, linestyle="--", label=f"{label}: hidden tests pass"
            )
        xs, ys = series(run, "integrity/proxy_only")
        if len(xs):
            right.plot(xs, _smooth(ys), color=color, label=f"{label}: paid, hidden tests fail")
        xs, ys = series(run, "integrity/canary_pass_rate")
        if len(xs):
            right.scatter(xs, ys, color=color, marker="x", s=18, label=f"{label}: canary pass rate")
        marked: set[str] = set()
        for record in run.events():
            event = record["event"]
            if event.get("severity") not in ("warning", "critical"):
                continue
            kind = str(event.get("kind"))
            style = ":" if kind == "rollback" else "-." if "canary" in kind else "--"
            name = f"{label}: {kind}"
            for ax in (left, right):
                ax.axvline(
                    record["step"],
                    color=color,
                    linestyle=style,
                    linewidth=1.0,
                    alpha=0.8,
                    label=name if ax is right and name not in marked else None,
                )
            marked.add(name)
    for ax, ylabel in ((left, "share of completions (smoothed)"), (right, "share")):
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title or "Proxy reward vs the true objective on the same samples")
    return save_figure(fig, path)
