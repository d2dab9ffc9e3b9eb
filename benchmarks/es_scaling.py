"""Evolution strategies: seconds per generation, local vs 1 and 2 Ray workers, projected further.

For each recipe (cartpole-es: a cheap batched NumPy env; lunarlander-es: a Box2D env whose
step costs ~30 us), one local run trains a few generations first, so that the timed
generations play episodes of a policy that has started to learn. From that state, the same
generations are then timed on `backend: local` and on `backend: ray` with 1 and 2 workers.
ES gives exactly the same generations on any backend (tests/test_es.py), so every backend
plays the same episodes: the timings differ only by where they were played. Ray startup is
timed apart; the learner's own share (noise regeneration, gradient, Adam) is `perf/update_s`.

The projection to more workers uses the formula of docs/scaling.md,

    T(W) = E / W + c + L

with E the time one free core needs to play a whole generation (the CPU seconds of the single
worker), c the Ray cost per generation (1 worker minus local) and L the learner's update; the 2-worker
column checks it against a measurement.

    python benchmarks/es_scaling.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.common import markdown_table, write_section  # noqa: E402
from payoff import train  # noqa: E402

# (recipe, warm-up generations, timed generations)
RECIPES = [("cartpole-es", 8, 8), ("lunarlander-es", 70, 6)]
PROJECT = (4, 8, 16, 32)


def build(recipe: str, overrides: list[str]) -> Any:
    cls, config, _ = train.resolve(recipe, ["eval_every=0", *overrides], seed=0)
    return cls(config=config)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_generations(
    recipe: str, state: dict[str, Any], generations: int, overrides: list[str]
) -> dict[str, Any]:
    """Mean seconds per generation (and its parts) from `state`, on the given backend, and
    the CPU seconds per generation each Ray worker used."""
    algo = build(recipe, overrides)
    algo.load_state_dict(state)
    startup, pids = 0.0, []
    if algo.config.backend == "ray":
        import ray

        started = time.perf_counter()
        algo.population.start()
        startup = time.perf_counter() - started
        pids = ray.get(
            [w.__ray_call__.remote(lambda _: os.getpid()) for w in algo.population.workers]
        )
    seconds, updates, steps = [], [], []
    cpu_before = [cpu_seconds(pid) for pid in pids]
    try:
        for _ in range(generations):
            before, started = algo.step, time.perf_counter()
            algo.iterate()
            seconds.append(time.perf_counter() - started)
            updates.append(algo._record["perf/update_s"])
            steps.append(algo.step - before)
        worker_cpu = [
            (cpu_seconds(pid) - before) / generations
            for pid, before in zip(pids, cpu_before, strict=True)
        ]
    finally:
        algo.population.close()
    return {
        "seconds": statistics.mean(seconds),
        "update": statistics.mean(updates),
        "steps": statistics.mean(steps),
        "startup": startup,
        "worker_cpu": worker_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer generations")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows, checks = [], []
    load_before = os.getloadavg()[0]
    for recipe, warmup, generations in RECIPES:
        if args.quick:
            warmup, generations = min(warmup, 3), 3
        algo = build(recipe, ["backend=local"])
        for _ in range(warmup):
            algo.iterate()
        state = algo.state_dict()
        pairs = algo.config.pairs
        local = time_generations(recipe, state, generations, ["backend=local"])
        remote = {
            w: time_generations(recipe, state, generations, ["backend=ray", f"ray.num_workers={w}"])
            for w in (1, 2)
        }
        learner = local["update"]
        # E: what one free core needs to play the whole generation: the CPU seconds the single
        # worker used (its wall time also holds the time it waited for a core on a busy machine)
        evaluation = remote[1]["worker_cpu"][0]
        overhead = max(remote[1]["seconds"] - local["seconds"], 0.0)  # c (noisy under load)

        def projected(
            workers: int, E: float = evaluation, c: float = overhead, L: float = learner
        ) -> float:
            return E / workers + c + L

        rows.append(
            [
                f"{recipe} ({pairs} pairs, {local['steps']:,.0f} steps/gen)",
                f"{local['seconds']:.3f}",
                f"{remote[1]['seconds']:.3f}",
                f"{remote[2]['seconds']:.3f} ({projected(2):.3f})",
                *(f"{projected(w):.3f}" if w <= pairs else "-" for w in PROJECT),
                f"{learner * 1000:.1f} / {overhead * 1000:.0f}",
                " / ".join(f"{c:.2f}" for c in remote[1]["worker_cpu"])
                + "; "
                + " + ".join(f"{c:.2f}" for c in remote[2]["worker_cpu"]),
                f"{remote[1]['startup']:.1f} / {remote[2]['startup']:.1f}",
            ]
        )
        checks.append(
            f"{recipe}: E = {evaluation:.3f} s, c = {overhead * 1000:.0f} ms, "
            f"L = {learner * 1000:.1f} ms; measured 2 workers {remote[2]['seconds']:.3f} s vs "
            f"{projected(2):.3f} s by the formula; floor c + L = {overhead + learner:.3f} s"
        )
        print(rows[-1], flush=True)
        print(checks[-1], flush=True)
    ray.shutdown()
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    table = markdown_table(
        [
            "recipe (batch)",
            "local s/gen",
            "ray 1 worker",
            "ray 2 workers (formula)",
            *(f"{w} workers (projected)" for w in PROJECT),
            "learner L ms / ray c ms",
            "worker CPU s/gen (1 worker; 2 workers)",
            "ray startup s (1 / 2)",
        ],
        rows,
    )
    body = (
        f"Seconds per generation (mean of the timed generations, after a few local warm-up "
        f"generations so the policy has begun to learn), the same generations on each backend "
        f"(ES gives identical generations on any number of workers). Ray runs a private local "
        f"instance with 2 CPUs, one per worker; its startup is timed apart. Projected columns: "
        f"T(W) = E / W + c + L (docs/scaling.md, docs/evolution-strategies.md), with E = the CPU "
        f"seconds one worker used per generation (the time on a free core), c = 1 worker minus "
        f"local (clamped at 0; under load it is within the noise). The worker CPU column is the CPU time each worker process "
        f"used per generation (/proc): when the 2 workers' CPU seconds add up to the 1 worker's, "
        f"the work split evenly and only free cores were missing. Load average of the machine (1 min): {load}; on a "
        f"2-core machine whose cores other jobs also use, 2 workers have no free core to "
        f"scale into, so compare the projection with a measurement on free cores.\n\n{table}\n\n"
        + "\n".join(f"- {line}" for line in checks)
    )
    write_section("es_scaling", "Evolution strategies: seconds per generation vs workers", body)


if __name__ == "__main__":
    main()
