"""GRPO's loss and sampling variants compared on the arithmetic task, over several seeds.

Every variant trains the `arithmetic-grpo` recipe (the tiny Llama pretrained to ~40% on
2-digit addition, 64 prompts x 8 completions per step) set back to plain GRPO for the same
number of steps, and changes only what its row says:

    grpo      plain GRPO: per-sequence loss, group-std scaling (Shao et al. 2024); the
              recipe ran this until these measurements made it switch to dapo
    dr_grpo   Dr. GRPO: constant normaliser, no std scaling (Liu et al. 2025)
    dapo      DAPO: token-level loss, dynamic sampling, truncated completions masked
              (Yu et al. 2025); its clip-higher is left out: the recipe makes one
              on-policy pass per batch, where the ratio is 1 and no clip acts
    dapo_loss DAPO's loss alone: token-level aggregation, truncated completions masked
    dynamic   DAPO's dynamic sampling alone
    rloo      leave-one-out baseline (Ahmadian et al. 2024), per-sequence loss
    async     plain GRPO with asynchronous generation, one step stale, token-level
              truncated importance sampling (payoff's async_generation)
    async_raw the same without the mismatch correction

Greedy held-out accuracy (200 problems) is measured every `--eval-every` steps. Runs go two
at a time, one torch thread each (the async variant has a second process), so wall-clock
numbers here are indicative only; benchmarks/grpo_vs_trl.py measures speed alone.

    python benchmarks/grpo_variants.py [--steps 200] [--seeds 0 1 2] [--variants ...]

Results are kept in runs/grpo_variants_results.json: a later call with --variants reruns
only those and redraws the figure and table from everything kept (same --steps).

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
# Plain GRPO: every variant starts from these (the recipe itself now runs DAPO's settings).
GRPO = ["loss_aggregation=grpo", "dynamic_sampling=false", "mask_truncated=false"]
VARIANTS: dict[str, list[str]] = {
    "grpo": [],
    "dr_grpo": ["loss_aggregation=dr_grpo", "scale_rewards=false"],
    "dapo": ["loss_aggregation=dapo", "dynamic_sampling=true", "mask_truncated=true"],
    "dapo_loss": ["loss_aggregation=dapo", "mask_truncated=true"],
    "dynamic": ["dynamic_sampling=true"],
    "rloo": ["advantage_estimator=rloo"],
    "async": ["async_generation=true", "max_staleness=1"],
    "async_raw": ["async_generation=true", "max_staleness=1", "mismatch_correction=none"],
}
# The two panels of the figure.
PANELS = {
    "losses, advantages, sampling": ["grpo", "dr_grpo", "dapo", "dapo_loss", "dynamic", "rloo"],
    "asynchronous generation": ["grpo", "async", "async_raw"],
}
RESULTS = ROOT / "runs" / "grpo_variants_results.json"


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
        *GRPO,
        *VARIANTS[job["variant"]],
    ]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        run = train(RECIPE, overrides, seed=job["seed"], out=out, media=False, loggers="none")
        records = run.records()
    seconds = time.perf_counter() - started
    curve = [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]
    train_s = [r["perf/step_s"] for r in records if "perf/step_s" in r]
    # Share of the sampled groups not trained on: flat ones, and any beyond the batch.
    dropped = [1 - 64 / r["train/sampled_groups"] for r in records if "train/sampled_groups" in r]
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


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = len({r["seed"] for r in results})
    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 4.4), sharey=True)
    for ax, (title, names) in zip(axes, PANELS.items(), strict=True):
        for name in names:
            runs = [r for r in results if r["variant"] == name]
            if not runs:
                continue
            steps = [s for s, _ in runs[0]["curve"]]
            acc = np.array([[a for _, a in r["curve"]] for r in runs])
            mean = acc.mean(0)
            ax.plot(steps, mean, marker="o", ms=3, label=f"{name} ({mean[-1]:.3f})")
            if len(runs) > 1:
                ax.fill_between(steps, acc.min(0), acc.max(0), alpha=0.12)
        ax.set_title(title)
        ax.set_xlabel("GRPO step (64 prompts x 8 completions)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("held-out greedy accuracy")
    fig.suptitle(f"GRPO variants on 2-digit addition: mean of {seeds} seeds (band: min-max)")
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
    parser.add_argument(
        "--redraw", action="store_true", help="no runs: redraw and rewrite from the kept results"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if not args.redraw:
        warm_base_model()
    jobs = (
        []
        if args.redraw
        else [
            {"variant": v, "seed": s, "steps": args.steps, "eval_every": args.eval_every}
            for s in args.seeds
            for v in args.variants
        ]
    )
    with ThreadPoolExecutor(args.parallel) as pool:
        fresh = list(pool.map(run_job, jobs))
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    done = {(r["variant"], r["seed"]) for r in fresh}
    same = {"steps": args.steps, "eval_every": args.eval_every}
    results = [
        r
        for r in kept
        if (r["variant"], r["seed"]) not in done and all(r[k] == v for k, v in same.items())
    ]
    results += fresh
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results))
    image = ROOT / "docs" / "img" / "grpo-variants.png"
    plot(results, image)
    rows = []
    for name in [v for v in VARIANTS if any(r["variant"] == v for r in results)]:
        runs = [r for r in results if r["variant"] == name]
        start = np.mean([r["curve"][0][1] for r in runs])
        final = np.array([r["curve"][-1][1] for r in runs])
        best = np.array([max(a for _, a in r["curve"]) for r in runs])
        dropped = [r["dropped"] for r in runs if r["dropped"] is not None]
        rows.append(
            [
                name,
                " ".join(VARIANTS[name]) or "(plain GRPO)",
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
            "overrides of plain GRPO",
            "accuracy at step 0",
            f"after {args.steps} steps (mean ± sd)",
            "best along the run (mean)",
            "s / step",
            "groups dropped",
        ],
        rows,
    )
    body = (
        f"`{RECIPE}` for {args.steps} steps, seeds "
        f"{', '.join(map(str, sorted({r['seed'] for r in results})))}, greedy "
        f"accuracy on 200 held-out problems every {args.eval_every} steps; two runs at a time, "
        f"one torch thread each (about 40 s + 0.35-0.6 s per step each). s / step is indicative only (runs "
        f"shared the 2 cores; the async variant's sampler process is not counted in its "
        f"thread). 'groups dropped' is the share of the groups dynamic sampling sampled "
        f"that it did not train on (flat ones, and any beyond the batch).\n\n{table}\n\n![GRPO variants](img/grpo-variants.png)"
    )
    write_section("grpo_variants", "GRPO variants on the arithmetic task", body)
    print(f"wrote {image}")


if __name__ == "__main__":
    main()
