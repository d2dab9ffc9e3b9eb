"""Pictures of a self-play league: Elo over training and the league table."""

from __future__ import annotations

from payoff.rollout.elo import LeagueRow


def plot_elo(
    curve: list[tuple[int, int, float]],
    rows: list[LeagueRow],
    baselines: list[str],
    path: str,
    title: str = "Elo over training",
    errors: list[float] | None = None,
) -> str:
    """Elo of the best network against self-play games, with the baselines as lines;
    `errors` (one standard error per point, payoff.rollout.elo.rating_errors) draws bars of
    ±2 of them, so a dip that short league matches explain reads as one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratings = {row.player: row.rating for row in rows}
    fig, ax = plt.subplots(figsize=(7, 4))
    games = [g for _, g, _ in curve]
    elos = [elo for _, _, elo in curve]
    if errors is not None and len(errors) == len(curve):
        bars = [2 * e if e < float("inf") else 0.0 for e in errors]
        ax.errorbar(
            games,
            elos,
            yerr=bars,
            marker="o",
            capsize=3,
            label="best network (MCTS), bars ±2 standard errors",
        )
    else:
        ax.plot(games, elos, marker="o", label="best network (MCTS)")
    for name in baselines:
        if name in ratings:
            ax.axhline(ratings[name], linestyle="--", linewidth=1, color="gray")
            ax.annotate(
                name,
                (games[0] if games else 0, ratings[name]),
                fontsize=8,
                xytext=(2, 2),
                textcoords="offset points",
                color="dimgray",
            )
    ax.set_xlabel("self-play games")
    ax.set_ylabel("Elo (random = 0)" if "random" in ratings else "Elo")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_league(rows: list[LeagueRow], path: str, title: str = "Elo league") -> str:
    """The league table as a picture, so run reports (which show PNGs) include it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    header = ["player", "Elo", "games", "won", "drawn", "lost", "score"]
    cells = [
        [r.player, f"{r.rating:.0f}", r.games, r.wins, r.draws, r.losses, f"{r.score:.2f}"]
        for r in rows
    ]
    # The table fills the axes (bbox), so the figure's height is the rows' height plus the title.
    fig, ax = plt.subplots(figsize=(7, 0.28 * (len(rows) + 1) + 0.5))
    ax.axis("off")
    table = ax.table(cellText=cells, colLabels=header, cellLoc="center", bbox=(0.0, 0.0, 1.0, 1.0))
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
