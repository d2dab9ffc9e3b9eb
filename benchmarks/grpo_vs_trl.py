"""payoff GRPO vs TRL's GRPOTrainer: same tiny model, task, group size, batch and completion length.

Both start from the same pretrained tiny Llama (payoff's cached base model for 2-digit
addition), train for the same number of optimizer steps with the same number of prompts
and completions per step, beta = 0, group-std scaling and the same learning rate, and are
then scored by the same greedy held-out evaluation. Each run is its own subprocess (so
peak memory is its own). The configurations:

    trl grpo        TRL, loss_type="grpo" (per-sequence), one torch thread
    trl dapo        TRL, loss_type="dapo" (its default); its importance-sampling correction
                    of the rollout/trainer mismatch needs vLLM, so on CPU it is off
    trl dapo x2     the same with two torch threads (the 2 cores, as payoff async uses)
    payoff grpo     payoff, loss_aggregation grpo, one thread
    payoff dapo     payoff, loss_aggregation dapo, one thread
    payoff async    payoff, dapo loss, asynchronous generation one step stale (token-level
                    truncated IS correction), one thread for the trainer and one for the
                    sampler process: the 2 cores
    payoff sync x2  payoff, dapo loss, synchronous, two threads: the fair baseline for async

every one on each of --seeds. Then the same-wall-clock comparison: the payoff
configurations train again for as long as TRL's dapo took for its steps (mean over
seeds), as many steps as fit, and are scored the same way.

Run: python benchmarks/grpo_vs_trl.py [--quick] [--speed-only]
     python benchmarks/grpo_vs_trl.py --async-pairs 8   # async vs sync x2 alone, interleaved

--speed-only measures the steps/s and accuracy at --steps alone: no same-wall-clock reruns and
no async pair at --async-prompts (about a third of the full run's time).
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

# (side, GRPO / GRPOConfig options, torch threads)
CONFIGS: dict[str, tuple[str, dict, int]] = {
    "trl grpo": ("trl", {"loss_type": "grpo"}, 1),
    "trl dapo": ("trl", {"loss_type": "dapo"}, 1),
    "trl dapo x2": ("trl", {"loss_type": "dapo"}, 2),
    "payoff grpo": ("payoff", {"loss_aggregation": "grpo"}, 1),
    "payoff dapo": ("payoff", {"loss_aggregation": "dapo"}, 1),
    "payoff async": (
        "payoff",
        {"loss_aggregation": "dapo", "async_generation": True, "max_staleness": 1},
        1,
    ),
    "payoff sync x2": ("payoff", {"loss_aggregation": "dapo"}, 2),
}


def base_model(which: str = "bench") -> str:
    """The base model's folder: "bench", BASE (550 SFT steps, held-out accuracy 0.055), or
    "recipe", the arithmetic-grpo recipe's base (SFT until 40% of training problems, 0.495)."""
    from payoff.algos.sft import build_base_model
    from payoff.core.config import from_dict
    from payoff.envs.tasks import TaskConfig
    from payoff.models.base_model import BaseModelConfig
    from payoff.recipes import load_recipe

    base = BASE if which == "bench" else load_recipe("arithmetic-grpo")[1]["base"]
    return str(build_base_model(from_dict(TaskConfig, TASK), from_dict(BaseModelConfig, base), 6))


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
        """GRPO that keeps the seconds spent in its own evaluations (excluded, as for TRL)
        and stops when a wall-clock budget of training seconds is spent."""

        eval_seconds = 0.0
        budget = 0.0
        began = 0.0

        def evaluate(self, *a, **k):
            started = time.perf_counter()
            result = super().evaluate(*a, **k)
            self.eval_seconds += time.perf_counter() - started
            return result

        def iterate(self):
            super().iterate()
            spent = time.perf_counter() - self.began - self.eval_seconds
            if self.budget and spent >= self.budget:
                self.state.solved_at = self.step  # the loop's stop condition

    steps = args.steps * 20 if args.budget else args.steps
    grpo = TimedGRPO(
        # on a GPU: float32 weights, the decoder under bf16 autocast (TRL's bf16=True)
        model={"path": args.model, "autocast": args.device == "cuda"},
        task=TASK,
        steps=steps,
        prompts_per_step=args.prompts,
        group_size=args.group,
        learning_rate=args.lr,
        warmup_steps=0,
        beta=0.0,
        scale_rewards=True,
        max_new_tokens=6,
        eval_every=10**9,
        checkpoint_every=10**9,
        seed=args.seed,
        threads=args.threads,
        device=args.device,
        **json.loads(args.options),
    )
    start_accuracy = held_out_accuracy(grpo.model, grpo.tokenizer)
    if hasattr(grpo.sampler, "start"):  # the sampling process: started before the clock
        grpo.sampler.start(wait=True)
    grpo.budget = args.budget
    grpo.began = time.perf_counter()
    grpo.learn(steps)  # no run directory: no checkpoints or reports in the timing
    seconds = time.perf_counter() - grpo.began - grpo.eval_seconds  # TRL's train() has none
    tokens = sum(
        h["train/completion_length"] * args.prompts * args.group
        for h in grpo.history
        if "train/completion_length" in h
    )
    return {
        "seconds": seconds,
        "steps": grpo.step,
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
            scale_rewards="group",
            temperature=1.0,
            top_p=1.0,
            max_steps=args.steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=args.device == "cpu",
            bf16=args.device == "cuda",
            seed=args.seed,
            disable_dropout=True,
            dataloader_num_workers=0,
            **json.loads(args.options),
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
        "steps": args.steps,
        "tokens": tokens,
        "start_accuracy": start_accuracy,
        "accuracy": held_out_accuracy(trainer.model, tokenizer),
    }


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ["PAYOFF_PROGRESS"] = "0"
    result = (run_payoff if args.side == "payoff" else run_trl)(args)
    # The trainer's peak plus the largest child's (payoff async's sampling process).
    peaks = [
        resource.getrusage(who).ru_maxrss
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    ]
    result["peak_rss_mb"] = sum(peaks) / 1024
    print("RESULT " + json.dumps(result), flush=True)


def run_one(name: str, args, model: str, seed: int, budget: float = 0.0) -> dict:
    side, options, threads = CONFIGS[name]
    command = [sys.executable, __file__, "--side", side, "--model", model]
    command += ["--lr", str(args.lr), "--steps", str(args.steps), "--seed", str(seed)]
    command += ["--prompts", str(args.prompts), "--group", str(args.group)]
    command += ["--threads", str(threads), "--options", json.dumps(options)]
    command += ["--budget", str(budget), "--device", args.device]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"{name} run failed (seed {seed})")
    result = {"name": name, "seed": seed, "budget": budget, **json.loads(line[7:])}
    result["steps_per_s"] = result["steps"] / result["seconds"]
    within = f" budget {budget:.1f} s" if budget else ""
    print(
        f"{name:15s} seed {seed}{within}: "
        f"{result['steps']} steps, {result['steps_per_s']:.2f} steps/s, peak RSS "
        f"{result['peak_rss_mb']:.0f} MB, held-out accuracy {result['start_accuracy']:.3f} -> "
        f"{result['accuracy']:.3f}",
        flush=True,
    )
    return result


def async_pairs(args, model: str) -> None:
    """Asynchronous vs synchronous payoff (2 threads) in rounds of one run each, back to back
    (the order swapped every round), so that both see the machine in the same state: this
    machine's speed drifts by tens of percent between minutes, more than the effect."""
    import numpy as np

    from benchmarks.common import markdown_table, write_section

    pair = ("payoff async", "payoff sync x2")
    rows, ratios = [], []
    for seed in range(args.async_pairs):
        order = pair if seed % 2 == 0 else pair[::-1]
        result = {name: run_one(name, args, model, seed) for name in order}
        ratio = result[pair[0]]["steps_per_s"] / result[pair[1]]["steps_per_s"]
        ratios.append(ratio)
        first = "async" if order == pair else "sync x2"
        rows.append(
            [seed, first]
            + [round(result[name]["steps_per_s"], 2) for name in pair]
            + [f"{ratio:.2f}x"]
        )
    median = float(np.median(ratios))
    print(f"async / sync x2, median of {len(ratios)} rounds: {median:.2f}x")
    table = markdown_table(
        ["seed", "ran first", "async steps/s", "sync x2 steps/s", "async / sync x2"], rows
    )
    body = (
        f"payoff's GRPO with asynchronous generation (dapo loss, one step stale, token-level "
        f"truncated IS; the trainer and the sampling process one torch thread each) against "
        f"synchronous payoff with 2 torch threads: {args.prompts} prompts x {args.group} "
        f"completions, {args.steps} steps a run, the setup of the "
        f"{'grpo_vs_trl' if args.base == 'bench' else 'grpo_vs_trl_recipe_base'} section. The two "
        "runs of a round follow each other (which goes first alternates), each in a fresh "
        "process, the sampling process started before the clock.\n\n"
        f"{table}\n\n**Median of the rounds: async = {median:.2f}x sync x2** (range "
        f"{min(ratios):.2f}-{max(ratios):.2f}x; goal 1.4x)."
    )
    name, title = "grpo_async_pairs", "GRPO: asynchronous vs synchronous payoff, interleaved"
    if args.steps != 100:  # a run length of its own keeps its own section
        name, title = f"{name}_{args.steps}", f"{title}, {args.steps} steps a run"
    if (args.prompts, args.group) != (8, 8):  # and so does a batch shape
        name += f"_{args.prompts}x{args.group}"
        title += f", {args.prompts} prompts x {args.group}"
    if args.base == "recipe":  # and the recipe's base
        name += "_recipe_base"
        title += ", from the arithmetic-grpo recipe's base"
    write_section(name, title, body)


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="30 steps, one seed")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--lr", type=float, default=5e-5, help="learning rate of every run")
    parser.add_argument(
        "--async-prompts", type=int, default=64, help="prompts per step of the async rerun"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="skip the same-wall-clock reruns and the async pair at --async-prompts",
    )
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where both libraries train (cuda: bf16 autocast for payoff, bf16=True for TRL); "
        "a GPU run writes its own section, grpo_vs_trl_gpu",
    )
    parser.add_argument(
        "--async-pairs",
        type=int,
        default=0,
        help="only measure asynchronous against synchronous payoff (2 threads), interleaved: "
        "this many rounds of one run each, seeds 0, 1, ... (writes grpo_async_pairs, suffixed "
        "by --steps, the batch shape and --base where they differ from the defaults)",
    )
    parser.add_argument(
        "--base",
        choices=["bench", "recipe"],
        default="bench",
        help="bench: 550 SFT steps (held-out 0.055); recipe: arithmetic-grpo's base (0.495)",
    )
    parser.add_argument("--side", choices=["payoff", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        child(args)
        return
    args.steps = args.steps or (30 if args.quick else 100)
    seeds = args.seeds[:1] if args.quick else args.seeds
    model = base_model(args.base)
    print(f"base model: {model}", flush=True)
    if args.async_pairs:
        async_pairs(args, model)
        return
    load_before = os.getloadavg()[0]
    results = [run_one(name, args, model, seed) for seed in seeds for name in args.configs]

    def mean(name: str, key: str, budget: bool = False) -> float:
        runs = [r for r in results if r["name"] == name and bool(r["budget"]) == budget]
        return float(np.mean([r[key] for r in runs]))

    reference = "trl dapo" if "trl dapo" in args.configs else args.configs[0]
    budget = mean(reference, "seconds")
    payoff_names = [n for n in args.configs if CONFIGS[n][0] == "payoff"]
    if not args.speed_only:
        results += [
            run_one(name, args, model, seed, budget) for seed in seeds for name in payoff_names
        ]
    load_after = os.getloadavg()[0]
    from benchmarks.common import markdown_table, write_section

    rows = []
    for name in args.configs:
        row = [
            name,
            mean(name, "steps_per_s"),
            round(mean(name, "peak_rss_mb")),
            mean(name, "start_accuracy"),
            mean(name, "accuracy"),
        ]
        if CONFIGS[name][0] == "payoff" and not args.speed_only:
            row += [round(mean(name, "steps", True)), mean(name, "accuracy", True)]
        elif CONFIGS[name][0] == "payoff":
            row += ["-", "-"]
        else:
            row += [args.steps if name == reference else "-", "-"]
        rows.append(row)
    table = markdown_table(
        [
            "configuration",
            "optimizer steps / s",
            "peak RSS (MB)",
            "held-out accuracy before",
            f"after {args.steps} steps",
            f"steps in {budget:.1f} s",
            f"accuracy after {budget:.1f} s",
        ],
        rows,
    )
    ratios = []
    for name in payoff_names:
        two_cores = name in ("payoff async", "payoff sync x2")  # against TRL on 2 threads
        for trl in ("trl dapo x2",) if two_cores else ("trl dapo", "trl grpo"):
            if trl in args.configs:
                ratio = mean(name, "steps_per_s") / mean(trl, "steps_per_s")
                ratios.append(f"{name} / {trl}: {ratio:.2f}x")
    async_line = ""
    if "payoff async" in args.configs and "payoff sync x2" in args.configs:
        speedup = mean("payoff async", "steps_per_s") / mean("payoff sync x2", "steps_per_s")
        one_thread = ""
        if "payoff dapo" in args.configs:
            over = mean("payoff async", "steps_per_s") / mean("payoff dapo", "steps_per_s")
            one_thread = f"; {over:.2f}x synchronous payoff with 1 thread (payoff dapo)"
        async_line = (
            f" **Asynchronous payoff runs {speedup:.2f}x synchronous payoff with 2 threads** "
            f"(the same 2 cores) at {args.prompts} prompts x {args.group}{one_thread}."
        )
        print(f"async / sync x2: {speedup:.2f}x{one_thread}")
    if async_line and not args.speed_only:
        # The same pair at the arithmetic-grpo recipe's batch, where generation is a
        # larger share of a step.
        big = argparse.Namespace(**{**vars(args), "prompts": args.async_prompts, "steps": 40})
        pair = {
            name: [run_one(name, big, model, seed)["steps_per_s"] for seed in seeds]
            for name in ("payoff async", "payoff sync x2", "payoff dapo")
        }
        big_speedup = float(np.mean(pair["payoff async"]) / np.mean(pair["payoff sync x2"]))
        async_line = async_line[:-1] + (
            f"; {big_speedup:.2f}x synchronous with 2 threads at {args.async_prompts} prompts "
            f"x {args.group} (40 steps: "
            f"async {np.mean(pair['payoff async']):.2f}, sync with 2 threads "
            f"{np.mean(pair['payoff sync x2']):.2f}, sync with 1 thread "
            f"{np.mean(pair['payoff dapo']):.2f} steps/s)."
        )
        print(f"async / sync x2 at {args.async_prompts} prompts: {big_speedup:.2f}x")
    print("; ".join(ratios), flush=True)
    body = (
        "Same base model (payoff's tiny Llama "
        + (
            f"pretrained {BASE['steps']} SFT steps on 2-digit addition"
            if args.base == "bench"
            else "SFT'd on 2-digit addition until it answers 40% of training problems, the "
            "arithmetic-grpo recipe's base (--base recipe)"
        )
        + f"), {args.prompts} prompts x {args.group} completions per optimizer step, max 6 "
        f"new tokens, {args.steps} steps, beta 0, group-std scaling, constant lr {args.lr:g}, "
        f"each run in its own process; means over seeds {', '.join(map(str, seeds))}. Seconds "
        "are training only (payoff's evaluations are subtracted; TRL's train() runs none). "
        "TRL's importance-sampling correction needs vLLM, so TRL runs without it on CPU. "
        f"Accuracy: greedy, 200 held-out problems, the same evaluation code for both. "
        + (
            "Run with --speed-only: no same-wall-clock reruns (the last two columns) and no "
            "async pair at a larger batch."
            if args.speed_only
            else f"The last two columns: the payoff configurations trained again for the mean "
            f"seconds {reference} took for {args.steps} steps."
        )
        + f"\n\n{table}\n\nSpeed ratios (optimizer "
        f"steps/s): " + "; ".join(ratios) + "." + async_line + " Peak RSS: the training "
        "process's peak (each library's imports included; TRL pulls in datasets/pyarrow) plus "
        "the largest peak among the processes it started (payoff async: its sampling "
        "process). Machine load average (1 min) "
        f"{load_before:.1f} at the start, {load_after:.1f} at the end (2 cores)."
    )
    cores = os.cpu_count() or 1
    if max(load_before, load_after) > cores:
        body += (
            f" The load was above the {cores} cores: a process with 2 torch threads then "
            "spin-waits for cores that other processes hold, so the 2-thread rows (trl dapo "
            "x2, payoff sync x2) measure that contention more than the library, and async "
            "(two processes of 1 thread) is better compared with payoff on 1 thread."
        )
    if args.device == "cuda":
        import torch

        body = (
            f"On a GPU ({torch.cuda.get_device_name(0)}, torch {torch.__version__}): both "
            "libraries train on CUDA, payoff with float32 weights and the decoder under bf16 "
            "autocast, TRL with bf16=True; 'one thread' means one torch CPU thread. "
            + body.replace(" (2 cores)", "").replace(
                "so TRL runs without it on CPU", "and vLLM is not installed, so TRL runs without it"
            )
        )
        shape = "" if (args.prompts, args.group) == (8, 8) else f"_{args.prompts}x{args.group}"
        title = f"GRPO on a GPU: payoff vs TRL GRPOTrainer ({args.prompts} x {args.group})"
        write_section(f"grpo_vs_trl_gpu{shape}", title, body)
        return
    if args.base == "recipe":
        title = "GRPO: payoff vs TRL GRPOTrainer, from the arithmetic-grpo recipe's base"
        write_section("grpo_vs_trl_recipe_base", title, body)
        return
    write_section("grpo_vs_trl", "GRPO: payoff vs TRL GRPOTrainer", body)


if __name__ == "__main__":
    main()
