"""Multi-turn rollout throughput: episodes/s and model tokens/s of batched tool-using episodes.

Runs the calculator task's episodes with the tiny model (`--model RUN/model` for a trained
agent, whose episodes have tool calls and several turns; fresh weights otherwise, which
write one long turn), reporting turns and tokens per episode alongside at several batch sizes, and writes a section of docs/benchmarks.md.
There is no reference library for multi-turn tool rollouts in this repository's extras, so
the comparison is batched (all live episodes in one generate call per turn) vs one episode
at a time, the ratio being what batching buys.

    python benchmarks/agent_rollouts.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from benchmarks.common import write_section  # noqa: E402
from payoff.algos.agent_grpo import STOP  # noqa: E402
from payoff.envs.text.formats import PlainFormat  # noqa: E402
from payoff.envs.text.tasks import AgentTaskConfig, make_agent_task  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm  # noqa: E402
from payoff.rollout.episodes import rollout_episodes  # noqa: E402
from payoff.rollout.generation import LocalSampler, SamplingConfig  # noqa: E402


def measure(sampler, tokenizer, task, tasks, batch: int) -> dict[str, float]:
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=72, stop=STOP)
    generator = torch.Generator().manual_seed(0)
    started = time.perf_counter()
    episodes = []
    for i in range(0, len(tasks), batch):
        episodes += rollout_episodes(
            sampler,
            tokenizer,
            tasks[i : i + batch],
            task.make_env,
            PlainFormat(),
            sampling,
            generator,
        )
    seconds = time.perf_counter() - started
    tokens = sum(e.model_tokens for e in episodes)
    return {
        "episodes_per_s": len(episodes) / seconds,
        "tokens_per_s": tokens / seconds,
        "turns": float(np.mean([e.turns for e in episodes])),
        "tokens": tokens / len(episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes")
    parser.add_argument(
        "--model", default="", help="a trained agent (RUN/model) so episodes have several turns"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_lm(ModelConfig(path=args.model), seed=0)
    sampler = LocalSampler(model, tokenizer)
    task = make_agent_task(AgentTaskConfig(max_turns=3))
    n = 32 if args.quick else 128
    tasks = task.sample(np.random.default_rng(0), n)
    rows = []
    base = measure(sampler, tokenizer, task, tasks[: n // 4], 1)
    rows.append((1, base))
    for batch in (16, 64):
        rows.append((batch, measure(sampler, tokenizer, task, tasks, batch)))
    lines = [
        "| episodes per generate call | episodes/s | model tokens/s | turns/episode | tokens/episode | vs 1 |",
        "|---|---|---|---|---|---|",
    ]
    for batch, r in rows:
        lines.append(
            f"| {batch} | {r['episodes_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['turns']:.2f} | "
            f"{r['tokens']:.0f} | {r['tokens_per_s'] / base['tokens_per_s']:.1f}x |"
        )
    table = "\n".join(lines)
    print(table)
    write_section(
        "agent_rollouts",
        "Multi-turn agent rollouts (tiny model, calculator task, CPU)",
        f"`python benchmarks/agent_rollouts.py{' --quick' if args.quick else ''}`: {n} calculator "
        f"episodes (up to 3 turns, <= 72 tokens a turn, temperature 1) with the {'calculator-agent model' if args.model else 'untrained tiny Llama'} on "
        "1 CPU thread of a shared 2-core machine. Each turn of all live episodes is one batched "
        "generate call with a KV cache; the ratio is tokens/s against one episode at a time.\n\n"
        + table,
    )


if __name__ == "__main__":
    main()
