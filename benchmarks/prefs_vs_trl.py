"""payoff DPO and reward-model training vs TRL's DPOTrainer and RewardTrainer: same model, data, batch.

Both sides start from payoff's cached tiny SFT model on styled addition (the preference
algorithms' default base), train on the same synthetic preference pairs for the same number
of optimizer steps at the same batch size, one torch thread each, and are timed end to end:
from building the trainer (tokenizing the data, and for DPO computing the reference
log-probabilities once -- TRL's precompute_ref_log_probs, payoff's default) to the last
optimizer step. Each side runs in its own subprocess. Held-out pairwise accuracy after
training is printed too, so speed is not bought with a broken loss. Imports (torch,
transformers' Llama, trl, payoff: seconds of one-off module loading on both sides) happen
before the clock starts and are reported in their own column.

payoff packs each step's pairs into a few rows: the prompt once, then chosen and rejected,
which see the prompt but not each other (a 4D attention mask), so no padding is computed
and the prompt runs once per pair; see payoff/models/logprobs.py. TRL pads
chosen and rejected to the batch's longest and runs the prompt twice.

Run: python benchmarks/prefs_vs_trl.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def base_model() -> str:
    from payoff.algos.reward_model import preference_base, small_base, styled_task

    return str(preference_base(styled_task(), small_base())())


def pairs(n_train: int, n_test: int):
    from payoff.algos.reward_model import styled_task
    from payoff.envs.tasks import make_task
    from payoff.envs.tasks.preferences import PreferenceDataConfig, load_pairs

    config = PreferenceDataConfig(bias=0.0, train_pairs=n_train, test_pairs=n_test)
    return load_pairs(config, make_task(styled_task()), seed=0)


def run_payoff(args) -> dict:
    import torch

    torch.set_num_threads(1)
    imported = time.time()
    import transformers.models.llama.modeling_llama  # noqa: F401  (what from_pretrained loads lazily)

    from payoff.algos.dpo import DPO
    from payoff.algos.reward_model import RewardModel

    started = time.time()
    imports = started - imported
    if args.what == "dpo":
        algo = DPO(
            model={"path": args.model},
            preferences={"bias": 0.0, "train_pairs": args.pairs, "test_pairs": 200},
            steps=args.steps,
            batch_size=args.batch,
            learning_rate=args.lr,
            eval_every=0,
            log_every=10**9,
            checkpoint_every=10**9,
        )
        algo.learn()
        seconds = time.time() - started
        accuracy = algo.evaluate_pairs(with_gold=False).accuracy
    else:
        algo = RewardModel(
            model={"path": args.model},
            preferences={"bias": 0.0, "train_pairs": args.pairs, "test_pairs": 200},
            steps=args.steps,
            batch_size=args.batch,
            learning_rate=args.lr,
            eval_every=0,
            log_every=10**9,
            checkpoint_every=10**9,
        )
        algo.learn()
        seconds = time.time() - started
        accuracy = algo.evaluate().accuracy
    return {"seconds": seconds, "accuracy": accuracy, "imports": imports}


def run_trl(args) -> dict:
    import torch

    torch.set_num_threads(1)
    imported = time.time()
    import transformers.models.llama.modeling_llama  # noqa: F401  (what from_pretrained loads lazily)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from trl import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer

    from payoff.models.lm import load_tokenizer

    train, test = pairs(args.pairs, 200)
    columns = lambda rows: [{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows]  # noqa: E731
    tokenizer = load_tokenizer(args.model)
    out = tempfile.mkdtemp()
    common = dict(
        output_dir=out,
        per_device_train_batch_size=args.batch,
        max_steps=args.steps,
        learning_rate=args.lr,
        logging_steps=10**9,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        lr_scheduler_type="constant",
        warmup_steps=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    started = time.time()
    imports = started - imported
    if args.what == "dpo":
        model = AutoModelForCausalLM.from_pretrained(args.model)
        trainer = DPOTrainer(
            model=model,
            args=DPOConfig(beta=0.1, precompute_ref_log_probs=True, **common),
            train_dataset=Dataset.from_list(columns(train)),
            processing_class=tokenizer,
        )
        trainer.train()
        seconds = time.time() - started
        from payoff.algos.dpo import pair_logprobs

        reference = AutoModelForCausalLM.from_pretrained(args.model)
        now, ref = (
            pair_logprobs(model.eval(), tokenizer, test),
            pair_logprobs(reference, tokenizer, test),
        )
        accuracy = float((((now - ref)[:, 0] - (now - ref)[:, 1]) > 0).float().mean())
    else:
        model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1)
        model.config.pad_token_id = tokenizer.pad_token_id
        trainer = RewardTrainer(
            model=model,
            args=RewardConfig(**common),
            train_dataset=Dataset.from_list(columns(train)),
            processing_class=tokenizer,
        )
        trainer.train()
        seconds = time.time() - started
        model.eval()
        with torch.no_grad():

            def score(texts):
                enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                return model(**enc).logits[:, 0]

            chosen = score([r["prompt"] + r["chosen"] for r in test])
            rejected = score([r["prompt"] + r["rejected"] for r in test])
        accuracy = float((chosen > rejected).float().mean())
    return {"seconds": seconds, "accuracy": accuracy, "imports": imports}


def child(args) -> None:
    result = run_payoff(args) if args.side == "payoff" else run_trl(args)
    print("RESULT " + json.dumps(result))


def spawn(side: str, what: str, args, model: str) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        side,
        "--what",
        what,
        "--model",
        model,
        "--steps",
        str(args.steps),
        "--batch",
        str(args.batch),
        "--pairs",
        str(args.pairs),
        "--lr",
        str(args.lr),
    ]
    env = {**os.environ, "PAYOFF_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{side} {what} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--child", default="")
    parser.add_argument("--what", default="dpo")
    parser.add_argument("--model", default="")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    if args.child:
        args.side = args.child
        child(args)
        return
    if args.quick:
        args.steps = 20
    model = base_model()
    rows, ratios = [], []
    for what, lr in (("dpo", 1e-4), ("reward_model", 1e-3)):
        args.lr = lr
        results = {side: spawn(side, what, args, model) for side in ("payoff", "trl")}
        pairs_total = args.steps * args.batch
        speed = {side: pairs_total / r["seconds"] for side, r in results.items()}
        ratio = speed["payoff"] / speed["trl"]
        ratios.append((what, ratio))
        for side in ("payoff", "trl"):
            rows.append(
                f"| {what} | {side} | {results[side]['seconds']:.1f} | {speed[side]:.0f} "
                f"| {results[side]['accuracy']:.3f} | {results[side]['imports']:.1f} |"
            )
        print(
            f"{what}: payoff {speed['payoff']:.0f} pairs/s, trl {speed['trl']:.0f} pairs/s, ratio {ratio:.2f}x; "
            f"held-out accuracy payoff {results['payoff']['accuracy']:.3f}, trl {results['trl']['accuracy']:.3f}"
        )
    if args.quick:
        return  # a smoke run: the page keeps the full run's numbers
    from benchmarks.common import write_section

    markdown = "\n".join(
        [
            f"Tiny Llama (payoff's styled-addition SFT model), {args.steps} steps x {args.batch} pairs, one torch "
            "thread, each side in its own process, timed from building the trainer (tokenizing; DPO: reference "
            "log-probs computed once on both sides) to the last step; imports (loaded before the clock starts) "
            "in their own column. Accuracy: held-out pairs after training. payoff packs each step's pairs "
            "(prompt once, chosen and rejected each seeing only the prompt, no padding); TRL pads them.",
            "",
            "| trainer | library | seconds | pairs/s | held-out accuracy | imports s (untimed) |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            *[f"- **{what}: payoff / TRL throughput = {ratio:.2f}x**" for what, ratio in ratios],
            "",
            f"Command: `python benchmarks/prefs_vs_trl.py{' --quick' if args.quick else ''}`. A shared, loaded "
            "2-core machine: timings are noisy.",
        ]
    )
    write_section("prefs_vs_trl", "Preferences: DPO and reward-model training vs TRL", markdown)


if __name__ == "__main__":
    main()
