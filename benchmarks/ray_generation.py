"""LLM generation tokens/s on Ray with 1 and 2 workers vs in-process, and the GRPO learner's time.

One GRPO-shaped batch (64 prompts x 8 completions x 32 new tokens, the tiny Llama, CPU) is
sampled by payoff's `LocalSampler` in this process and by `RaySampler` with 1 and 2
generation workers. Before every timed call the weights are changed in place, as a learner
update would, so each call pays the weight broadcast (put once, got by every worker) as in
training; Ray startup (workers importing torch and loading the model) is timed apart. One
GRPO update on the same batch is timed too: it is the learner's share of each step, the
quantity that decides where adding generation workers stops helping (docs/scaling.md).

    python benchmarks/ray_generation.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.common import markdown_table, write_section  # noqa: E402
from payoff.algos.grpo import GRPO  # noqa: E402
from payoff.algos.shared.group import group_advantages  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm, save_lm  # noqa: E402
from payoff.rollout.generation import Generation, LocalSampler, SamplingConfig  # noqa: E402
from payoff.rollout.ray_generation import RaySampler  # noqa: E402
from payoff.rollout.ray_pool import RayConfig  # noqa: E402

PROMPTS, GROUP, NEW_TOKENS = 64, 8, 32


def timed_calls(sampler, model, prompts, sampling, calls: int) -> tuple[float, list[float]]:
    """(tokens/s over `calls` generate calls after one warm-up, seconds of each call)."""
    generator = torch.Generator().manual_seed(0)
    sampler.generate(prompts, sampling, generator)  # warm-up (Ray: first weights fetched)
    tokens, seconds = 0, []
    for _ in range(calls):
        with torch.no_grad():  # a learner step: every trainable weight written in place
            for p in model.parameters():
                p.mul_(1.0)
        started = time.perf_counter()
        out = sampler.generate(prompts, sampling, generator)
        seconds.append(time.perf_counter() - started)
        tokens += int(out.lengths.sum())
    return tokens / sum(seconds), seconds


def update_seconds(model_dir: str, generation: Generation, repeats: int) -> float:
    """Mean wall time of one GRPO update (one pass, whole batch) on `generation`."""
    algo = GRPO(
        model={"path": model_dir},
        prompts_per_step=PROMPTS,
        group_size=GROUP,
        max_new_tokens=NEW_TOKENS,
        threads=1,
    )
    rewards = torch.rand(PROMPTS * GROUP, generator=torch.Generator().manual_seed(0))
    advantages = group_advantages(rewards, GROUP, True)
    started = time.perf_counter()
    for _ in range(repeats):
        algo.update(generation, advantages)
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls per measurement")
    args = parser.parse_args()
    calls = 2 if args.quick else 5
    torch.set_num_threads(1)  # the learner's setting in GRPO (threads: 1); workers use 1 each
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    model_dir = str(save_lm(model, tokenizer, Path(tempfile.mkdtemp()) / "model"))
    weight_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    prompts = [f"{a}+{b}=" for a, b in zip(range(10, 74), range(37, 101), strict=True)]
    rows = [p for p in prompts for _ in range(GROUP)]  # GRPO's adjacent groups
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=NEW_TOKENS)

    # The broadcast alone: one put of the weights and one get of them (same node).
    put_ms = []
    for _ in range(5):
        started = time.perf_counter()
        ray.get(ray.put({n: p.detach() for n, p in model.named_parameters()}))
        put_ms.append((time.perf_counter() - started) * 1000)

    results = []
    local = LocalSampler(model, tokenizer)
    rate, seconds = timed_calls(local, model, rows, sampling, calls)
    results.append(("local (in-process)", rate, seconds, 0.0))
    print(results[-1], flush=True)
    # Half the batch in one process: what each of 2 workers does, without Ray. Its time next
    # to the full batch's is the best 2 workers could do on 2 free cores.
    rate, seconds = timed_calls(local, model, rows[: len(rows) // 2], sampling, calls)
    results.append(("local, half the batch", rate, seconds, 0.0))
    print(results[-1], flush=True)
    for workers in (1, 2):
        sampler = RaySampler(
            RayConfig(num_workers=workers),
            ModelConfig(path=model_dir),
            model,
            tokenizer.pad_token_id,
            group_size=GROUP,
        )
        try:
            sampler.start()
            rate, seconds = timed_calls(sampler, model, rows, sampling, calls)
            results.append((f"ray, {workers} worker(s)", rate, seconds, sampler.startup_seconds))
        finally:
            sampler.close()
        print(results[-1], flush=True)
    ray.shutdown()

    generation = local.generate(rows, sampling, torch.Generator().manual_seed(0))
    update_s = update_seconds(model_dir, generation, 1 if args.quick else 2)
    local_rate = results[0][1]
    table = markdown_table(
        ["sampler", "tokens/s", "vs local", "s per call (median)", "worker startup s"],
        [
            [
                name,
                f"{rate:,.0f}",
                f"{rate / local_rate:.2f}x",
                f"{statistics.median(seconds):.2f}",
                f"{startup:.1f}" if startup else "-",
            ]
            for name, rate, seconds, startup in results
        ],
    )
    batch_tokens = int(generation.lengths.sum())
    body = (
        f"One GRPO-shaped batch: {PROMPTS} prompts x {GROUP} completions x {NEW_TOKENS} new "
        f"tokens ({batch_tokens:,} sampled tokens), payoff's tiny Llama "
        f"({weight_mb:.1f} MB of float32 weights), temperature 1, CPU, 1 torch thread per "
        f"process. Mean over {calls} calls after a warm-up; the weights change before every "
        f"call, so each call includes the weight broadcast. Ray runs a private local "
        f"instance with 2 CPUs, one per worker.\n\n{table}\n\n"
        f"Learner side: one GRPO update (one pass over the whole batch) takes "
        f"{update_s:.2f} s; generating the batch locally takes "
        f"{batch_tokens / local_rate:.2f} s. Broadcast: a put + get of the weights takes "
        f"{statistics.median(put_ms):.1f} ms on this node; the rest of the 1-worker overhead "
        f"is scheduling and returning the `Generation`. On a shared 2-core machine the learner process "
        f"and both workers compete for the same cores, so 2 workers cannot reach 2x here; "
        f"see docs/scaling.md for the formula across machines."
    )
    print(body)
    write_section("ray_generation", "Ray generation workers (GRPO): tokens/s vs workers", body)


if __name__ == "__main__":
    main()
