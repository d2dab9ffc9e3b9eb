"""Pictures of language-model RL runs: accuracy and completion length over training (R1's
figure), and an agent's held-out success and tool calls per task kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from payoff.core.errors import RunError
from payoff.envs.tasks import TASKS
from payoff.report.plots import plt, save_figure, series
from payoff.track.run import Run

# What train/accuracy counts, by the verifier that decides it (the task's first default
# reward): (what passing reads as, what failing reads as).
VERIFIER_WORDS = {
    "code": ("hidden tests pass", "hidden tests fail"),
    "math": ("answer right (math verifier)", "answer wrong"),
    "exact": ("answer right (exact-match verifier)", "answer wrong"),
    "final_answer": ("answer right and stated last (final_answer verifier)", "answer wrong"),
    "countdown": ("countdown solved (verifier)", "not solved"),
    "instructions": ("every instruction followed (verifier)", "an instruction missed"),
}


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


def verifier_name(run: Run) -> str | None:
    """The verifier that decided a run's train/accuracy: as the run recorded it in its
    summary, else the built-in task's first default reward; None when unknown (own data from
    a run that did not record it: its rows decide between answers and tests)."""
    try:
        recorded = run.summary().get("verifier")
    except RunError:  # (the page says why it is not shown)
        recorded = None
    if isinstance(recorded, str) and recorded:
        return recorded
    task = run.config.get("task")
    name = task.get("name") if isinstance(task, dict) else None
    rewards = getattr(TASKS.get(str(name)), "default_rewards", ())
    return str(rewards[0]) if rewards else None


def truth_words(runs: list[Run]) -> tuple[str, str]:
    """(pass, fail) phrases for what the runs' train/accuracy counts: 'hidden tests pass'
    for code, 'answer right (math verifier)' for arithmetic; one verifier's words only when
    every run has it."""
    names = {verifier_name(run) for run in runs}
    name = names.pop() if len(names) == 1 else None
    if name is None:
        return "the task's verifier passes", "the verifier fails"
    return VERIFIER_WORDS.get(name, (f"verifier {name!r} passes", f"{name!r} fails"))


def _outside_unit(values: list[np.ndarray]) -> bool:
    """Whether any value lies outside [0, 1] (a reward that a share's axis would cut off)."""
    return any(len(v) and (float(np.min(v)) < 0.0 or float(np.max(v)) > 1.0) for v in values)


def plot_integrity(runs: list[Run], labels: list[str], path: str | Path, title: str = "") -> Path:
    """Left: the paid reward and the task's verifier on the same samples (smoothed), per
    run; right: the share paid but failing the verifier, and canary pass rates. Alarms are
    vertical lines in each run's colour (canary dash-dot, others dashed, rollbacks dotted).

    The verifier's share is named by what it checks (hidden tests, the answer: `truth_words`).
    A reward outside 0..1 (weights, penalties) gets an axis of its own on the left panel's
    right side, scaled to it, instead of running off the share's 0..1."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    passes, fails = truth_words(runs)
    rewards = [series(run, "train/reward") for run in runs]
    paid_axis: Any = left
    if _outside_unit([ys for _, ys in rewards]):
        paid_axis = left.twinx()
        paid_axis.set_ylabel("reward paid (proxy, smoothed)")
        fig.subplots_adjust(wspace=0.35)  # room for the twin axis's label
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        color = f"C{i % 10}"
        xs, ys = rewards[i]
        if len(xs):
            where = "" if paid_axis is left else ", right axis"
            paid_axis.plot(
                xs, _smooth(ys), color=color, label=f"{label}: reward paid (proxy{where})"
            )
        xs, ys = series(run, "train/accuracy")
        if len(xs):
            left.plot(xs, _smooth(ys), color=color, linestyle="--", label=f"{label}: {passes}")
        xs, ys = series(run, "integrity/proxy_only")
        if len(xs):
            right.plot(xs, _smooth(ys), color=color, label=f"{label}: paid, {fails}")
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
    shared = paid_axis is left
    for ax, ylabel in (
        (left, "reward and share (smoothed)" if shared else "share of completions (smoothed)"),
        (right, "share"),
    ):
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        handles, names = ax.get_legend_handles_labels()
        if ax is left and not shared:  # the reward's lines live on the twin axis: one
            # legend for both, under the panel, where neither axis's lines run over it
            more, more_names = paid_axis.get_legend_handles_labels()
            handles, names = more + handles, more_names + names
            ax.legend(handles, names, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
        else:
            ax.legend(handles, names, fontsize=7)
    if not shared:
        low, high = paid_axis.get_ylim()
        paid_axis.set_ylim(min(low, 0.0), max(high, 1.0))  # 0 and 1 stay in view on both
    fig.suptitle(
        title or f"Reward paid (proxy) vs the true objective, {passes}, on the same samples"
    )
    return save_figure(fig, path)
