"""GRPO's loss and sampling variants compared on the arithmetic task, over several seeds.

Every variant trains the `arithmetic-grpo` recipe (the tiny Llama pretrained to ~40% on
2-digit addition, 64 prompts x 8 completions per step) for the same number of steps and
changes only what its row says:

    grpo      the recipe: per-sequence loss, group-std scaling (Shao et al. 2024)
    dr_grpo   Dr. GRPO: constant normaliser, no std scaling (Liu et al. 2025)
    dapo      DAPO: token-level loss, clip-higher 0.28, dynamic sampling, truncated
              completions masked (Yu et al. 2025)
    rloo      leave-one-out baseline (Ahmadian et al. 2024), per-sequence loss
    async     the recipe with asynchronous generation, one step stale, token-level
              truncated importance sampling (payoff's async_generation)

Greedy held-out accuracy (200 problems) is measured every `--eval-every` steps. Runs go two
at a time, one torch thread each (the async variant has a second process), so wall-clock
numbers here are indicative only; benchmarks/grpo_vs_trl.py measures speed alone.

    python benchmarks/grpo_variants.py [--steps 200] [--seeds 0 1 2] [--variants ...]

Writes docs/img/grpo-variants.png and the "GRPO variants" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import ROOT, markdown_table, write_section  # noqa: E402

RECIPE = "arithmetic-grpo"
VARIANTS: dict[str, list[str]] = {
    "grpo": [],
    "dr_grpo": ["loss_aggregation=dr_grpo", "scale_rewards=false"],
    "dapo": [
        "loss_aggregation=dapo",
        "clip_eps_high=0.28",
        "dynamic_sampling=true",
        "mask_truncated=true",
    ],
    "rloo": ["advantage_estimator=rloo"],
    "async": ["async_generation=true", "max_staleness=1"],
}


def worker(job: dict) -> None:
    import os

    os.environ["PAYOFF_PROGRESS"] = "0"
    from payoff.train import train

    overrides = [
        f"steps={job['steps']}",
        f"eval_every={job['eval_every']}",
        "checkpoint_every=100000",
        "threads=1",
        "final_eval_k=[1]",
        *VARIANTS[job["variant"]],
    ]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        run = train(RECIPE, overrides, seed=job["seed"], out=out, media=False, loggers="none")
        records = run.records()
    seconds = time.perf_counter() - started
    curve = [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]
    train_s = [r["perf/step_s"] for r in records if "perf/step_s" in r]
    dropped = [r["train/dropped_groups"] for r in records if "train/dropped_groups" in r]
    print(
        json.dumps(
            {
                "curve": curve,
                "seconds": seconds,
                "s_per_step": float(np.mean(train_s)),
                "dropped": float(np.mean(dropped)) if dropped else None,
            }
        )
    )


def run_job(job: dict) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{job} failed:\n{out.stderr[-3000:]}")
    result = {**job, **json.loads(out.stdout.strip().splitlines()[-1])}
    print(
        f"{job['variant']:8s} seed {job['seed']}: accuracy {result['curve'][0][1]:.3f} -> "
        f"{result['curve'][-1][1]:.3f}, {result['s_per_step']:.2f} s/step",
        flush=True,
    )
    return result


def warm_base_model() -> None:
    """Pretrain (or find cached) the recipe's base model once, before runs race for it."""
    from payoff.algos.sft import build_base_model
    from payoff.train import resolve

    _, config, _ = resolve(RECIPE, [], 0)
    build_base_model(config.task, config.base, config.max_new_tokens, config.device)


def plot(results: list[dict], variants: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name in variants:
        runs = [r for r in results if r["variant"] == name]
        steps = [s for s, _ in runs[0]["curve"]]
        acc = np.array([[a for _, a in r["curve"]] for r in runs])
        mean = acc.mean(0)
        ax.plot(steps, mean, marker="o", ms=3, label=f"{name} ({mean[-1]:.3f})")
        if len(runs) > 1:
            ax.fill_between(steps, acc.min(0), acc.max(0), alpha=0.15)
    seeds = len({r["seed"] for r in results})
    ax.set_xlabel("GRPO step (64 prompts x 8 completions)")
    ax.set_ylabel("held-out greedy accuracy")
    ax.set_title(f"GRPO variants on 2-digit addition: mean of {seeds} seeds (band: min-max)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    warm_base_model()
    jobs = [
        {"variant": v, "seed": s, "steps": args.steps, "eval_every": args.eval_every}
        for s in args.seeds
        for v in args.variants
    ]
    started = time.time()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(run_job, jobs))
    minutes = (time.time() - started) / 60
    image = ROOT / "docs" / "img" / "grpo-variants.png"
    plot(results, args.variants, image)
    rows = []
    for name in args.variants:
        runs = [r for r in results if r["variant"] == name]
        start = np.mean([r["curve"][0][1] for r in runs])
        final = np.array([r["curve"][-1][1] for r in runs])
        best = np.array([max(a for _, a in r["curve"]) for r in runs])
        dropped = [r["dropped"] for r in runs if r["dropped"] is not None]
        rows.append(
            [
                name,
                " ".join(VARIANTS[name]) or "(the recipe)",
                round(float(start), 3),
                f"{final.mean():.3f} ± {final.std():.3f}",
                round(float(best.mean()), 3),
                round(float(np.mean([r["s_per_step"] for r in runs])), 3),
                f"{np.mean(dropped):.2f}" if dropped else "-",
            ]
        )
    table = markdown_table(
        [
            "variant",
            "overrides of arithmetic-grpo",
            "accuracy at step 0",
            f"after {args.steps} steps (mean ± sd)",
            "best along the run (mean)",
            "s / step",
            "groups dropped",
        ],
        rows,
    )
    body = (
        f"`{RECIPE}` for {args.steps} steps, seeds {', '.join(map(str, args.seeds))}, greedy "
        f"accuracy on 200 held-out problems every {args.eval_every} steps; two runs at a time, "
        f"one torch thread each ({minutes:.0f} min in all). s / step is indicative only (runs "
        f"shared the 2 cores; the async variant's sampler process is not counted in its "
        f"thread). 'groups dropped' is dynamic sampling's share of sampled groups whose "
        f"rewards were all equal.\n\n{table}\n\n![GRPO variants](img/grpo-variants.png)"
    )
    write_section("grpo_variants", "GRPO variants on the arithmetic task", body)
    print(f"wrote {image}")


if __name__ == "__main__":
    main()
