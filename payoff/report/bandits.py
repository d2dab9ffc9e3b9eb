"""RL² on bandits against the classic bandit algorithms: held-out regret, and its figure.

`compare_on_bandits(agent)` plays a trained recurrent agent (RL²: recurrent PPO trained on
`payoff/BernoulliBandits-v0`) and Thompson sampling, UCB1, epsilon-greedy and random on the
same held-out bandits, with the same reward luck (payoff.envs.bandits.play_bandits).
Held-out bandits come from their own seed (`HELD_OUT_SEED` + arms), never from the
training envs' stream (which the run's seed starts). `plot_regret` draws cumulative regret
against pulls, one panel per setting. After `payoff train bandits-rl2`, the run's
media/bandit_regret.png is this figure (payoff.report.figures).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import torch

from payoff.envs.bandits import (
    BanditResult,
    PolicyPlayer,
    classic_players,
    play_bandits,
    sample_bandits,
)

BANDITS_ENV = "payoff/BernoulliBandits-v0"
HELD_OUT_SEED = 1_000_000_007  # + arms: the held-out bandits' own stream


def held_out_bandits(count: int, arms: int) -> np.ndarray:
    """The held-out bandits [count, arms] every comparison uses."""
    return sample_bandits(count, arms, HELD_OUT_SEED + arms)


def bandit_setting(agent: Any) -> tuple[int, int]:
    """(arms, pulls) the agent was trained on, from its env config."""
    kwargs = agent.config.env.kwargs
    return int(kwargs.get("arms", 5)), int(kwargs.get("pulls", 100))


def compare_on_bandits(
    agent: Any, bandits: int = 1000, pulls: int | None = None, seed: int = 0
) -> list[BanditResult]:
    """RL² (the agent's sampled policy, as it acts in training) and the classic algorithms
    on `bandits` held-out bandits for `pulls` pulls (default: the training trial's). `seed`
    fixes the reward luck and every method's random choices, the agent's included."""
    arms, trained_pulls = bandit_setting(agent)
    pulls = trained_pulls if pulls is None else pulls
    means = held_out_bandits(bandits, arms)
    rl2 = PolicyPlayer(functools.partial(agent.predict, deterministic=False), "RL² (GRU)")
    with torch.random.fork_rng():  # the agent's sampling: reproducible, and the run's RNG untouched
        torch.manual_seed(seed)
        return [play_bandits(player, means, pulls, seed) for player in [rl2, *classic_players()]]


def regret_table(results: list[BanditResult]) -> list[list[object]]:
    """Rows (method, mean regret ± standard error, regret / Thompson's)."""
    thompson = next((r.mean_regret for r in results if r.name == "Thompson sampling"), None)
    rows: list[list[object]] = []
    for result in results:
        ratio = f"{result.mean_regret / thompson:.2f}" if thompson else "-"
        rows.append([result.name, f"{result.mean_regret:.2f} ± {result.sem_regret:.2f}", ratio])
    return rows


def plot_regret(
    panels: list[tuple[str, list[BanditResult]]], path: str | Path, title: str = ""
) -> Path:
    """Cumulative regret vs pulls for every method, one panel per (label, results)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    styles = {
        "Thompson sampling": ("tab:green", "-"),
        "UCB1": ("tab:orange", "-"),
        "random": ("tab:gray", ":"),
    }
    for ax, (label, results) in zip(axes[0], panels, strict=True):
        for result in results:
            colour, line = styles.get(result.name, ("tab:purple", "--"))
            if result.name.startswith("RL²"):
                colour, line = "tab:blue", "-"
            pulls = np.arange(1, len(result.cumulative_regret) + 1)
            ax.plot(
                pulls,
                result.cumulative_regret,
                color=colour,
                linestyle=line,
                linewidth=2.2 if result.name.startswith("RL²") else 1.5,
                label=f"{result.name}: {result.mean_regret:.1f}",
            )
        ax.set_title(label)
        ax.set_xlabel("pulls")
        ax.set_ylabel("cumulative regret (mean over bandits)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bandit_regret(run: Any, algorithm: Any) -> list[Path]:
    """The figure of a recurrent PPO run on bandits (RL²): regret on 1,000 held-out
    bandits against the classic algorithms, plus the table as markdown; nothing for other
    envs."""
    if algorithm.config.env.id != BANDITS_ENV:
        return []
    arms, pulls = bandit_setting(algorithm)
    results = compare_on_bandits(algorithm)
    path = plot_regret(
        [(f"{arms} arms, {pulls} pulls, 1,000 held-out bandits", results)],
        run.media / "bandit_regret.png",
    )
    rows = regret_table(results)
    table = ["| method | regret | / Thompson |", "|---|---|---|"]
    table += [f"| {name} | {regret} | {ratio} |" for name, regret, ratio in rows]
    (run.media / "bandit_regret.md").write_text("\n".join(table) + "\n")
    return [path]
