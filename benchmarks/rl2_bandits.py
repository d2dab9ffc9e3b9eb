"""RL² on Bernoulli bandits vs Thompson sampling, UCB1, epsilon-greedy and random.

Reproduces the bandit experiment of RL² (Duan et al. 2016, https://arxiv.org/abs/1611.02779):
recurrent PPO trained on random bandits (arm means uniform in [0, 1]), its hidden state kept
for a whole trial, then measured on 1,000 bandits it never saw (their own seed, see
payoff.report.bandits), each method meeting the same bandits with the same reward luck.
Regret is expected regret: sum over pulls of max(means) - mean of the arm pulled.

For each setting (default 5 arms x 100 pulls, 10 x 100, and 5 x 500 played by the agent
trained on 100-pull trials: `5x500@100`; `5x500` trains on 500-pull trials) the script trains the
`bandits-rl2` recipe with that setting (runs under --out) or reuses a run given with
--runs, prints the regret table, draws docs/img/rl2-bandits-regret.png (cumulative regret vs
pulls, all methods) and writes its section of docs/benchmarks.md.

    python benchmarks/rl2_bandits.py [--steps N] [--settings 5x100,10x100,5x500@100]
    python benchmarks/rl2_bandits.py --runs runs/A runs/B ...   # evaluate trained runs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.common import ROOT, markdown_table, write_section  # noqa: E402
from payoff import train  # noqa: E402
from payoff.algos.recurrent_ppo import RecurrentPPO  # noqa: E402
from payoff.report.bandits import (  # noqa: E402
    bandit_setting,
    compare_on_bandits,
    plot_regret,
    regret_table,
)

FIGURE = ROOT / "docs" / "img" / "rl2-bandits-regret.png"


def parse_settings(text: str) -> list[tuple[int, int, int]]:
    """'5x100,10x100,5x500@100' -> (arms, pulls, pulls of the training trials); '@N' plays
    `pulls` with the agent trained on N-pull trials (a longer horizon than it trained for)."""
    settings = []
    for part in text.split(","):
        setting, _, trained = part.strip().partition("@")
        arms, _, pulls = setting.partition("x")
        if not (arms.isdigit() and pulls.isdigit() and (trained.isdigit() or not trained)):
            raise SystemExit(f"--settings: {part!r} is not ARMSxPULLS[@TRAINPULLS] (e.g. 5x100)")
        settings.append((int(arms), int(pulls), int(trained or pulls)))
    return settings


def train_setting(arms: int, pulls: int, steps: int | None, out: Path) -> tuple[Path, float]:
    """Train bandits-rl2 on (arms, pulls); returns the run directory and training seconds."""
    overrides = [f"env.kwargs.arms={arms}", f"env.kwargs.pulls={pulls}"]
    # a rollout is one whole trial per env (the pulls plus the step that starts the next)
    overrides += [f"num_steps={pulls + 1}", f"sequence_length={pulls + 1}"]
    overrides += [f"minibatch_size={(pulls + 1) * 16}"]
    if steps is not None:
        overrides.append(f"total_steps={steps}")
    started = time.perf_counter()
    run = train.train("bandits-rl2", overrides, seed=0, out=out, media=False)
    return run.path, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default="5x100,10x100,5x500@100")
    parser.add_argument("--steps", type=int, default=None, help="training steps per setting")
    parser.add_argument("--runs", nargs="*", default=[], help="trained bandits-rl2 runs")
    parser.add_argument("--bandits", type=int, default=1000, help="held-out bandits")
    parser.add_argument("--out", type=Path, default=ROOT / "runs")
    args = parser.parse_args()
    torch.set_num_threads(1)

    trained: dict[tuple[int, int], tuple[RecurrentPPO, str]] = {}
    for run_dir in args.runs:
        agent = RecurrentPPO.load(run_dir)
        summary = Path(run_dir) / "summary.json"
        seconds = json.loads(summary.read_text()).get("train_seconds") if summary.exists() else None
        took = f"{seconds:.0f} s of training, " if seconds else ""
        trained[bandit_setting(agent)] = (
            agent,
            f"{agent.step:,} steps ({took}{Path(run_dir).name})",
        )
    panels, sections = [], []
    for arms, pulls, trained_pulls in parse_settings(args.settings):
        if (arms, trained_pulls) not in trained:
            path, seconds = train_setting(arms, trained_pulls, args.steps, args.out)
            agent = RecurrentPPO.load(path)
            trained[(arms, trained_pulls)] = (agent, f"{agent.step:,} steps in {seconds:.0f} s")
        agent, how = trained[(arms, trained_pulls)]
        if trained_pulls != pulls:
            how += f" on {trained_pulls}-pull trials, playing {pulls}"
        results = compare_on_bandits(agent, bandits=args.bandits, pulls=pulls)
        rows = regret_table(results)
        label = f"{arms} arms, {pulls} pulls"
        if trained_pulls != pulls:
            label += f" (trained on {trained_pulls})"
        print(f"\n{label} ({args.bandits} held-out bandits; RL² trained {how})")
        for name, regret, ratio in rows:
            print(f"  {name:24s} {regret:>16s}   x{ratio} Thompson")
        panels.append((f"{label}, {args.bandits:,} held-out bandits", results))
        sections.append(
            f"**{label}** (RL² trained {how}):\n\n"
            + markdown_table(["method", "regret (± s.e.)", "regret / Thompson's"], rows)
        )
    plot_regret(panels, FIGURE, "RL² vs classic bandit algorithms: cumulative regret")
    print(f"\nfigure: {FIGURE}")
    body = (
        "Regret after the last pull, mean over held-out bandits (arm means uniform in "
        "[0, 1], drawn from their own seed), each method on the same bandits with the same "
        "reward luck. RL² = recurrent PPO (GRU 64) trained with recipe `bandits-rl2` on "
        "that setting; it samples from its policy, as in training. epsilon-greedy: each "
        "arm once, then epsilon 0.1. Training times are wall seconds on the machine below, "
        "as loaded as it was.\n\n"
        + "\n\n".join(sections)
        + "\n\n![RL² vs classic bandit algorithms](img/rl2-bandits-regret.png)\n"
    )
    write_section("rl2_bandits", "RL² on Bernoulli bandits vs classic algorithms", body)


if __name__ == "__main__":
    main()
