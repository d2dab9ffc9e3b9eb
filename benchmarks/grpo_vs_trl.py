"""payoff GRPO vs TRL's GRPOTrainer: same tiny model, task, group size, batch and completion length.

Both start from the same pretrained tiny Llama (payoff's cached base model for 2-digit
addition), train for the same number of optimizer steps with the same number of prompts
and completions per step, beta = 0, the per-sequence ('grpo') loss and group-std scaling,
and are then scored by the same greedy held-out evaluation. Each side runs in its own
subprocess (so peak memory is its own) with one torch thread, and each tries every
learning rate in --lrs; the table reports every try, and the headline compares each
side's best.

Run: python benchmarks/grpo_vs_trl.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASK = {"name": "addition", "options": {"digits": 2, "ood_digits": 3}, "eval_size": 200}
BASE = {"steps": 550, "batch_size": 128, "learning_rate": 0.001}


def base_model() -> str:
    from payoff.algos.sft import build_base_model
    from payoff.core.config import from_dict
    from payoff.envs.tasks import TaskConfig
    from payoff.models.base_model import BaseModelConfig

    return str(build_base_model(from_dict(TaskConfig, TASK), from_dict(BaseModelConfig, BASE), 6))


def held_out_accuracy(model, tokenizer) -> float:
    from payoff.algos.shared.lm import correctness_spec, evaluate_lm
    from payoff.core.config import from_dict
    from payoff.envs.tasks import TaskConfig, make_task
    from payoff.rewards.base import RewardMix

    task = make_task(from_dict(TaskConfig, TASK))
    verifier = RewardMix([correctness_spec(task)])
    return evaluate_lm(model, tokenizer, task.split("test", 200), verifier, 6).accuracy


def run_payoff(args) -> dict:
    from payoff.algos.grpo import GRPO

    class TimedGRPO(GRPO):
        """GRPO that keeps the seconds spent in its own evaluations (excluded, as for TRL)."""

        eval_seconds = 0.0

        def evaluate(self, *a, **k):
            started = time.perf_counter()
            result = super().evaluate(*a, **k)
            self.eval_seconds += time.perf_counter() - started
            return result

    grpo = TimedGRPO(
        model={"path": args.model},
        task=TASK,
        steps=args.steps,
        prompts_per_step=args.prompts,
        group_size=args.group,
        learning_rate=args.lr,
        beta=0.0,
        loss_aggregation="sequence",
        scale_rewards=True,
        max_new_tokens=6,
        eval_every=10**9,
        checkpoint_every=10**9,
        seed=args.seed,
    )
    start_accuracy = held_out_accuracy(grpo.model, grpo.tokenizer)
    started = time.perf_counter()
    grpo.learn(args.steps)  # no run directory: no checkpoints or reports in the timing
    seconds = time.perf_counter() - started - grpo.eval_seconds  # TRL's train() has none
    tokens = sum(
        h["train/completion_length"] * args.prompts * args.group
        for h in grpo.history
        if "train/completion_length" in h
    )
    return {
        "seconds": seconds,
        "tokens": tokens,
        "start_accuracy": start_accuracy,
        "accuracy": held_out_accuracy(grpo.model, grpo.tokenizer),
    }


def run_trl(args) -> dict:
    import numpy as np
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from payoff.core.config import from_dict
    from payoff.envs.tasks import TaskConfig, make_task
    from payoff.rewards import math_reward

    task = make_task(from_dict(TaskConfig, TASK))
    rows = task.sample(np.random.default_rng(args.seed), args.steps * args.prompts + 64)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
    model = AutoModelForCausalLM.from_pretrained(args.model)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    start_accuracy = held_out_accuracy(model, tokenizer)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.prompts * args.group,  # completions per step
            num_generations=args.group,
            max_completion_length=6,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            beta=0.0,
            loss_type="grpo",
            scale_rewards="group",
            temperature=1.0,
            top_p=1.0,
            max_steps=args.steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=args.seed,
            disable_dropout=True,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[math_reward],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    lengths = [
        h["completions/mean_length"]
        for h in trainer.state.log_history
        if "completions/mean_length" in h
    ]
    tokens = float(np.sum(lengths)) * args.prompts * args.group
    return {
        "seconds": seconds,
        "tokens": tokens,
        "start_accuracy": start_accuracy,
        "accuracy": held_out_accuracy(trainer.model, tokenizer),
    }


def child(args) -> None:
    import torch

    torch.set_num_threads(1)
    os.environ["PAYOFF_PROGRESS"] = "0"
    result = (run_payoff if args.side == "payoff" else run_trl)(args)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="40 steps and one learning rate per side"
    )
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument(
        "--lrs", default="", help="comma-separated learning rates to try on both sides"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--side", choices=["payoff", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    parser.add_argument("--lr", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        child(args)
        return
    steps = args.steps or (40 if args.quick else 100)
    lrs = (
        [float(x) for x in args.lrs.split(",")]
        if args.lrs
        else ([2e-4] if args.quick else [5e-5, 2e-4, 5e-4])
    )
    model = base_model()
    print(f"base model: {model}", flush=True)
    results = []
    load_before = os.getloadavg()[0]
    for lr in lrs:
        for side in ("payoff", "trl"):
            command = [
                sys.executable,
                __file__,
                "--side",
                side,
                "--model",
                model,
                "--lr",
                str(lr),
                "--steps",
                str(steps),
                "--prompts",
                str(args.prompts),
                "--group",
                str(args.group),
                "--seed",
                str(args.seed),
            ]
            out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"{side} run failed (lr {lr})")
            result = {"side": side, "lr": lr, **json.loads(line[7:])}
            result["s_per_step"] = result["seconds"] / steps
            result["tokens_per_s"] = result["tokens"] / result["seconds"]
            results.append(result)
            print(
                f"{side:6s} lr {lr:g}: {result['s_per_step']:.3f} s/step, {result['tokens_per_s']:.0f} tok/s, "
                f"peak RSS {result['peak_rss_mb']:.0f} MB, held-out accuracy {result['start_accuracy']:.3f} -> "
                f"{result['accuracy']:.3f}",
                flush=True,
            )
    best = {
        side: max((r for r in results if r["side"] == side), key=lambda r: r["accuracy"])
        for side in ("payoff", "trl")
    }
    speed = best["trl"]["s_per_step"] / best["payoff"]["s_per_step"]
    # The same comparison at every learning rate: one lr's pair is exposed to load changes.
    per_lr = [
        next(r for r in results if r["side"] == "trl" and r["lr"] == lr)["s_per_step"]
        / next(r for r in results if r["side"] == "payoff" and r["lr"] == lr)["s_per_step"]
        for lr in lrs
    ]
    load_after = os.getloadavg()[0]
    print(
        f"payoff is {speed:.2f}x TRL's speed per optimizer step; best held-out accuracy payoff "
        f"{best['payoff']['accuracy']:.3f} vs TRL {best['trl']['accuracy']:.3f}"
    )
    from benchmarks.common import markdown_table, write_section

    table = markdown_table(
        [
            "library",
            "learning rate",
            "s / optimizer step",
            "completion tokens / s",
            "peak RSS (MB)",
            "held-out accuracy before",
            "after",
        ],
        [
            [
                r["side"],
                r["lr"],
                r["s_per_step"],
                round(r["tokens_per_s"]),
                round(r["peak_rss_mb"]),
                r["start_accuracy"],
                r["accuracy"],
            ]
            for r in results
        ],
    )
    body = (
        f"Same base model (payoff's tiny Llama pretrained {BASE['steps']} SFT steps on 2-digit addition), "
        f"{args.prompts} prompts x {args.group} completions per optimizer step, max 6 new tokens, "
        f"{steps} steps, beta 0, per-sequence loss ('grpo'), group-std scaling, constant lr, one torch "
        f"thread each, each side in its own process; seconds are training only (payoff's own periodic and final evaluations are subtracted; TRL's train() runs none). Accuracy: greedy, 200 held-out problems, same "
        f"evaluation code for both.\n\n{table}\n\n"
        f"**payoff runs at {speed:.2f}x TRL's steps per second**; best held-out accuracy after {steps} steps: "
        f"payoff {best['payoff']['accuracy']:.3f} (lr {best['payoff']['lr']:g}), TRL {best['trl']['accuracy']:.3f} "
        f"(lr {best['trl']['lr']:g}). At each learning rate: "
        + ", ".join(f"{r:.2f}x (lr {lr:g})" for r, lr in zip(per_lr, lrs, strict=True))
        + ". Peak RSS includes each library's imports (TRL pulls in datasets/pyarrow). "
        f"Machine load average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the end "
        "(2 cores; above ~1 other work shared them)."
    )
    write_section("grpo_vs_trl", "GRPO: payoff vs TRL GRPOTrainer", body)


if __name__ == "__main__":
    main()
