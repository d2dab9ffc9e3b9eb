"""The over-optimization picture (Gao et al. 2022): proxy reward against gold score as the
policy moves away from where it started, with the divergence alarm marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def run_alarms(run: Any) -> list[dict[str, Any]]:
    """Alarm events of a run (divergence and friends), as dicts with at least a 'step'."""
    return [
        {"step": e["step"], **e["event"]}
        for e in run.events()
        if e["event"].get("kind") == "divergence"
    ]


def plot_overoptimization(
    records: list[dict[str, Any]],
    alarms: list[dict[str, Any]],
    path: Path,
    title: str = "",
    keys: tuple[str, str, str] = ("bon/sqrt_kl", "bon/proxy", "bon/gold"),
    xlabel: str = "sqrt(KL(best-of-N || policy))  (nats^0.5)",
    smooth: int = 1,
) -> Path:
    """Proxy and gold score against sqrt(KL) (keys: x, proxy, gold), the alarm's point marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key, proxy_key, gold_key = keys
    points = [r for r in records if proxy_key in r and x_key in r]
    x = np.array([p[x_key] for p in points])
    proxy = np.array([p[proxy_key] for p in points])
    gold = np.array([p[gold_key] for p in points])
    steps = [int(r["step"]) for r in points]
    if smooth > 1 and len(points) >= smooth:
        # Noisy per-step training records: sort by KL, then a moving average along it.
        order = np.argsort(x, kind="stable")
        kernel = np.ones(smooth) / smooth
        alarm_x = {
            int(a["step"]): x[steps.index(int(a["step"]))]
            for a in alarms
            if int(a["step"]) in steps
        }
        x, proxy, gold = (np.convolve(v[order], kernel, mode="valid") for v in (x, proxy, gold))
        points = [{} for _ in x]
        steps = []
        alarms = [{"step": step, "x": value} for step, value in alarm_x.items()]
    fig, left = plt.subplots(figsize=(6.4, 4.2))
    right = left.twinx()
    marker = "" if smooth > 1 else "o"
    left.plot(x, gold, marker + "-", color="tab:green", label="gold score (what we want)")
    right.plot(
        x,
        proxy,
        ("" if smooth > 1 else "s") + "--",
        color="tab:red",
        label="proxy reward model (what is optimized)",
    )
    for p, xi in zip(points, x, strict=True):
        if "bon/n" not in p:
            continue
        left.annotate(
            f"N={p['bon/n']:.0f}",
            (xi, gold[points.index(p)]),
            textcoords="offset points",
            xytext=(0, 6),
            fontsize=7,
            ha="center",
        )
    _mark_alarms(left, alarms, x, steps)
    left.set_xlabel(xlabel)
    left.set_ylabel("gold score", color="tab:green")
    right.set_ylabel("proxy reward-model score", color="tab:red")
    lines = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(lines, labels, loc="lower left", fontsize=8)
    left.set_title(
        title or "Best-of-N against a proxy reward model: proxy rises, gold peaks and falls"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mark_alarms(left: Any, alarms: list[dict[str, Any]], x: np.ndarray, steps: list[int]) -> None:
    """A dotted vertical line, labelled, at each alarm's x (its own, or its step's)."""
    for alarm in alarms:
        if "x" in alarm or int(alarm["step"]) in steps:
            xi = alarm["x"] if "x" in alarm else x[steps.index(int(alarm["step"]))]
            left.axvline(xi, color="black", linestyle=":", linewidth=1.2)
            left.text(
                xi,
                left.get_ylim()[1],
                " divergence alarm ",
                rotation=90,
                va="top",
                ha="right",
                fontsize=8,
            )
