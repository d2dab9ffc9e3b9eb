"""Rollout steps/s on Ray with 1 and 2 workers vs local collection, and the learner's time.

For each env, one PPO learner collects [num_steps x num_envs] rollouts through
`backend: local` (in-process VectorRunner) and `backend: ray` with 1 and 2 workers (the
envs split between them), timing collection alone (weights put + rollouts returned
included; Ray startup excluded by a warm-up rollout). One PPO update on the same batch is
timed too: it is the learner's share of each cycle, the quantity that decides where adding
workers stops helping (docs/scaling.md).

    python benchmarks/ray_scaling.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.common import markdown_table, write_section  # noqa: E402
from payoff.algos.ppo import ALGORITHM as PPO  # noqa: E402

# (env, vectorization, num_envs, num_steps): a cheap batched NumPy env and a Box2D one whose
# step costs ~50x more, so the env dominates collection.
ENVS = [
    ("CartPole-v1", "batched", 64, 64),
    ("LunarLander-v3", "sync", 16, 64),
]


def collect_rate(algo: PPO, rollouts: int) -> float:
    """Env steps/s of `rollouts` collections after one warm-up (starts Ray workers)."""
    algo.runner.collect(algo._policy_step, algo.storage, algo._values)
    before, started = algo.runner.env_steps, time.perf_counter()
    for _ in range(rollouts):
        algo.runner.collect(algo._policy_step, algo.storage, algo._values)
    return (algo.runner.env_steps - before) / (time.perf_counter() - started)


def update_seconds(algo: PPO, repeats: int) -> float:
    """Mean wall time of one PPO update (epochs x minibatches) on the collected batch."""
    started = time.perf_counter()
    for _ in range(repeats):
        algo.update(algo.storage, 0.0)
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rollouts per measurement")
    args = parser.parse_args()
    rollouts = 3 if args.quick else 10
    torch.set_num_threads(1)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    for env_id, vectorization, num_envs, num_steps in ENVS:
        common = dict(
            num_envs=num_envs,
            num_steps=num_steps,
            vectorization=vectorization,
            eval_every=0,
            minibatch_size=num_envs * num_steps // 4,
            epochs=4,
        )
        local = PPO(env_id, backend="local", **common)
        local_rate = collect_rate(local, rollouts)
        learn_s = update_seconds(local, rollouts)
        rates = {}
        for workers in (1, 2):
            algo = PPO(env_id, backend="ray", ray={"num_workers": workers}, **common)
            try:
                rates[workers] = collect_rate(algo, rollouts)
            finally:
                algo.runner.close()
        batch = num_envs * num_steps
        rows.append(
            [
                f"{env_id} ({num_envs} envs x {num_steps})",
                f"{local_rate:,.0f}",
                f"{rates[1]:,.0f}",
                f"{rates[2]:,.0f}",
                f"{rates[1] / local_rate:.2f}x",
                f"{rates[2] / rates[1]:.2f}x",
                f"{batch / local_rate * 1000:.0f} / {learn_s * 1000:.0f}",
            ]
        )
        print(rows[-1], flush=True)
    ray.shutdown()
    table = markdown_table(
        [
            "env (batch)",
            "local steps/s",
            "ray 1 worker",
            "ray 2 workers",
            "ray 1 / local",
            "2 / 1 workers",
            "collect / update ms (local)",
        ],
        rows,
    )
    body = (
        f"Rollout collection only (env steps/s, weights broadcast and rollout transfer "
        f"included, Ray startup excluded), mean of {rollouts} rollouts; the last column is "
        f"the local collection time of one batch next to one PPO update (4 epochs) on it. "
        f"Ray runs a private local instance with 2 CPUs, one per worker.\n\n{table}\n\n"
        f"Ratios above 1 are speed-ups. On a shared 2-core machine the learner process and "
        f"both workers compete for the same cores, so 2 workers cannot reach 2x here; see "
        f"docs/scaling.md for the formula across machines."
    )
    write_section("ray_scaling", "Ray rollout workers: steps/s vs workers", body)


if __name__ == "__main__":
    main()
