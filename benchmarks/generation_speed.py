"""Generation throughput: payoff's KV-cache sampler vs transformers' `generate`, same model and batch.

Both sample (temperature 1) from the same tiny Llama with the same prompts; tokens/s counts
the completion tokens actually produced (up to and including EOS), so early stops cost
neither side. The GRPO-shaped rows repeat each prompt G times in a row (as GRPO, and TRL's
GRPOTrainer, hand them to the sampler): payoff then runs each prompt once and shares its
KV cache across the group; `generate` gets the same repeated list.
Run: python benchmarks/generation_speed.py [--quick] [--model PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from benchmarks.common import markdown_table, write_section  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm  # noqa: E402
from payoff.rollout.generation import LocalSampler, SamplingConfig  # noqa: E402


def payoff_generate(model, tokenizer, prompts, new_tokens, seed):
    sampler = LocalSampler(model, tokenizer)
    out = sampler.generate(
        prompts, SamplingConfig(max_new_tokens=new_tokens), torch.Generator().manual_seed(seed)
    )
    return int(out.completion_mask.sum())


@torch.no_grad()
def hf_generate(model, tokenizer, prompts, new_tokens, seed):
    torch.manual_seed(seed)
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(
        **encoded,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    completion = out[:, encoded["input_ids"].shape[1] :]
    # tokens up to and including the first EOS
    is_eos = completion == tokenizer.eos_token_id
    after = (is_eos.cumsum(-1) - is_eos.long()) > 0
    return int((~after).sum())


def measure(fn, model, tokenizer, prompts, new_tokens, repeats):
    fn(model, tokenizer, prompts, new_tokens, 0)  # warm-up
    rates = []
    for r in range(repeats):
        started = time.perf_counter()
        tokens = fn(model, tokenizer, prompts, new_tokens, r + 1)
        rates.append(tokens / (time.perf_counter() - started))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer settings and repeats")
    parser.add_argument(
        "--model", default="", help="local HF model folder (default: payoff's tiny Llama)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_lm(ModelConfig(path=args.model))
    model.eval()
    settings = (  # (distinct prompts, samples per prompt, max new tokens)
        [(64, 1, 8), (256, 1, 8), (64, 1, 32), (8, 8, 8), (32, 8, 32)]
        if not args.quick
        else [(64, 1, 8), (8, 8, 8)]
    )
    repeats = 2 if args.quick else 5
    rows = []
    for distinct, group, new_tokens in settings:
        prompts = [
            f"{(7 * i) % 100}+{(13 * i) % 100}=" for i in range(distinct) for _ in range(group)
        ]
        ours = measure(payoff_generate, model, tokenizer, prompts, new_tokens, repeats)
        theirs = measure(hf_generate, model, tokenizer, prompts, new_tokens, repeats)
        rows.append(
            [distinct, group, new_tokens, round(ours), round(theirs), f"{ours / theirs:.2f}x"]
        )
        print(
            f"{distinct:4d} prompts x {group}, {new_tokens:3d} new tokens: payoff {ours:9.0f} tok/s, "
            f"transformers.generate {theirs:9.0f} tok/s, ratio {ours / theirs:.2f}x",
            flush=True,
        )
    name = args.model or "payoff tiny Llama (1.06M parameters, untrained)"
    body = (
        f"Model: {name}; sampling at temperature 1, torch threads {args.threads}; median of "
        f"{repeats} runs after a warm-up. tokens/s counts completion tokens up to EOS.\n\n"
        + markdown_table(
            [
                "prompts",
                "samples per prompt",
                "max new tokens",
                "payoff tok/s",
                "transformers generate tok/s",
                "payoff / HF",
            ],
            rows,
        )
    )
    write_section(
        "generation_speed", "Generation throughput: payoff sampler vs transformers generate", body
    )


if __name__ == "__main__":
    main()
