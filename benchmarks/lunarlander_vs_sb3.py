"""PPO on LunarLander-v3: payoff vs Stable-Baselines3, both with rl-zoo's hyperparameters.

Metric: wall-clock seconds of training until the deterministic policy averages >= 200 over
20 evaluation episodes (evaluated every 50,000 env steps by the same function on both
sides, evaluation time excluded), within rl-zoo's budget of 1M steps. Both sides use the
same settings: 16 envs x 1024 steps, minibatch 64, 4 epochs, gamma 0.999, GAE 0.98,
entropy 0.01, lr 3e-4, [64, 64] tanh actor and critic. Each trial runs in a fresh
subprocess with torch.set_num_threads(1), alternating payoff / SB3 seed by seed.

    python benchmarks/lunarlander_vs_sb3.py              # seed 0 (~15 min: SB3 takes most of it)
    python benchmarks/lunarlander_vs_sb3.py --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cartpole_vs_sb3 import (  # noqa: E402
    EVAL_EPISODES,
    median,
    payoff_learn_until_solved,
    sb3_learn_until_solved,
    sb3_ppo,
)
from benchmarks.common import markdown_table, worker_result, write_section  # noqa: E402

ENV = "LunarLander-v3"
TARGET = 200.0
EVAL_EVERY = 50_000
BUDGET = 1_000_000
# rl-zoo (rl-baselines3-zoo hyperparams/ppo.yml) LunarLander-v3; payoff's lunarlander-ppo recipe
# uses the same values.
SB3_PPO = dict(
    n_envs=16, n_steps=1024, batch_size=64, n_epochs=4, gae_lambda=0.98, gamma=0.999, ent_coef=0.01
)


def run_payoff(seed: int) -> dict[str, Any]:
    from payoff import train

    cls, config, _ = train.resolve(
        "lunarlander-ppo",
        [
            f"eval_every={EVAL_EVERY}",
            f"eval_episodes={EVAL_EPISODES}",
            f"stop_at_return={TARGET}",
            f"total_steps={BUDGET}",
            "final_eval_episodes=1",
        ],
        seed=seed,
    )
    return payoff_learn_until_solved(cls(config=config))


def run_sb3(seed: int) -> dict[str, Any]:
    model = sb3_ppo(ENV, SB3_PPO, seed)
    return sb3_learn_until_solved(model, BUDGET, EVAL_EVERY, TARGET, seed, ENV)


def trial(lib: str, seed: int) -> dict[str, Any]:
    return worker_result(__file__, {"lib": lib, "seed": seed}, f"{lib:>6} seed {seed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import torch

        torch.set_num_threads(1)
        job = json.loads(args.worker)
        print(json.dumps((run_payoff if job["lib"] == "payoff" else run_sb3)(job["seed"])))
        return
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, Any]]] = {"payoff": [], "sb3": []}
    for seed in range(args.seeds):
        for lib in ("payoff", "sb3"):
            results[lib].append(trial(lib, seed))
    rows = []
    for lib, runs in results.items():
        rows.append(
            [
                "payoff" if lib == "payoff" else "SB3 2.9.2 (rl-zoo)",
                f"{sum(r['solved'] for r in runs)}/{len(runs)}",
                f"{median([r['seconds'] for r in runs]):.0f}",
                ", ".join(f"{r['seconds']:.0f} s at {r['steps'] // 1000}k" for r in runs),
                f"{median([r['rollout_sps'] for r in runs]):.0f}",
                f"{max(r['peak_mb'] for r in runs):.0f}",
            ]
        )
    ratio = median([r["seconds"] for r in results["payoff"]]) / median(
        [r["seconds"] for r in results["sb3"]]
    )
    print(f"payoff / SB3 median seconds to {TARGET:.0f}: {ratio:.3f}")

    table = markdown_table(
        [
            "library",
            f"reached {TARGET:.0f}",
            "median s",
            "per seed",
            "rollout steps/s",
            "peak MB",
        ],
        rows,
    )
    body = (
        f"Seconds of training until the deterministic policy averages >= {TARGET:.0f} over "
        f"{EVAL_EPISODES} episodes of {ENV}, evaluated every {EVAL_EVERY:,} env steps by the "
        f"same function on both sides (evaluation excluded), within {BUDGET:,} steps (an "
        f"unsolved seed counts with its full time). Both use rl-zoo's settings: 16 envs x "
        f"1024 steps, minibatch 64, 4 epochs, gamma 0.999, GAE 0.98, entropy 0.01, lr 3e-4 "
        f"(payoff: its lunarlander-ppo recipe; Gymnasium's SyncVectorEnv, SB3: DummyVecEnv). "
        f"One torch thread each, each trial in a fresh process. Machine load average (1 min) "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.\n\n{table}\n\n"
        f"**payoff / SB3 median time to {TARGET:.0f} = {ratio:.3f}** (1/{1 / ratio:.1f})."
    )
    print(
        f"wrote {write_section('lunarlander_vs_sb3', 'LunarLander-v3: PPO, payoff vs Stable-Baselines3', body)}"
    )


if __name__ == "__main__":
    main()
