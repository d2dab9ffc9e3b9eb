"""Model-based RL's pictures: how wrong the learned model is, and whether the planner
believes it more than the env pays (payoff.algos.mbrl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_model_based(
    records: list[dict[str, Any]], model_errors: list[list[Any]], path: Path, title: str = ""
) -> Path:
    """Left: the model's held-out open-loop error vs prediction horizon, one line per refit
    (model_errors: [step, [MSE at 1..K steps]]). Right: the return the planner predicted
    over its horizon vs what the env paid over those steps, and the ensemble's disagreement
    along the plans (records: the run's metrics)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    cmap = plt.get_cmap("viridis")
    for j, (step, errors) in enumerate(model_errors):
        left.plot(
            range(1, len(errors) + 1),
            errors,
            marker=".",
            color=cmap(j / max(1, len(model_errors) - 1)),
            label=f"after {step} steps" if j in (0, len(model_errors) - 1) else None,
        )
    left.set_yscale("log")
    left.set_xlabel("open-loop prediction horizon (steps)")
    left.set_ylabel("MSE of the predicted observation (held out)")
    left.set_title("model error vs horizon")
    left.grid(alpha=0.3)
    if model_errors:
        left.legend(fontsize=8)
    plans = [r for r in records if "train/planned_return" in r]
    steps = [r["step"] for r in plans]
    right.plot(steps, [r["train/planned_return"] for r in plans], marker="o", label="planned")
    right.plot(steps, [r["train/realized_return"] for r in plans], marker="o", label="realized")
    right.set_xlabel("env steps")
    right.set_ylabel("return over the planning horizon")
    right.set_title("planned vs realized; disagreement (dashed)")
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="upper left")
    spread = [r for r in records if "train/model_disagreement" in r]
    twin = right.twinx()
    twin.plot(
        [r["step"] for r in spread],
        [r["train/model_disagreement"] for r in spread],
        color="gray",
        ls="--",
    )
    twin.set_yscale("log")
    twin.set_ylabel("ensemble disagreement along the plans")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
