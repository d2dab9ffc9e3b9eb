"""`make demo`: the headline recipe of every landed capability, shortened to fit a laptop's CPU.

Each step trains one recipe into runs/demo/ and writes its report; the demo ends by naming
the reports it wrote. Steps are independent, so they run `jobs` at a time (default 2, one
per core; each trains on one torch thread), each in its own process with its output in
runs/demo/logs/, longest first. A line says when each starts and what it reached when it
ends.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payoff.core.errors import PayoffError
from payoff.recipes import recipe_names


@dataclass
class DemoStep:
    title: str
    recipe: str
    overrides: list[str] = field(default_factory=list)
    seed: int = 0
    minutes: float = 0.5  # about how long it takes on one core: the longest start first


STEPS = [
    DemoStep("Tabular Q-learning on slippery FrozenLake", "frozenlake-q"),
    DemoStep("PPO on CartPole (batched NumPy envs)", "cartpole-ppo"),
    DemoStep(
        "The same recipe pointed at another env (Acrobot): its CartPole tuning is left out",
        "cartpole-ppo",
        ["env.id=Acrobot-v1", "total_steps=60000"],
    ),
    DemoStep(
        "Soft Actor-Critic swings up the pendulum (continuous torque, replay buffer)",
        "pendulum-sac",
        ["total_steps=6000"],
    ),
    DemoStep(
        "Model-based RL: MBPO learns the pendulum from 1,400 real steps (SAC on model rollouts)",
        "pendulum-mbpo",
        ["total_steps=1400"],
        minutes=1.0,
    ),
    DemoStep("Evolution strategies (OpenAI-ES) on CartPole", "cartpole-es"),
    DemoStep("Imitation: behavior cloning vs DAgger on the kart track", "kart-bc-vs-dagger-quick"),
    DemoStep(
        "Reward hacking caught: PPO paid for targets loops in the lagoon",
        "boatrace-ppo",
        ["total_steps=16000"],
    ),
    DemoStep(
        "A language model learns a reward hack in GRPO (returning the one test it is shown) "
        "and the default monitors catch it",
        "code-hack-grpo",
        ["steps=40", "eval_every=20"],
        minutes=4.0,
    ),
    DemoStep(
        "GRPO (DAPO loss, dynamic sampling) with verifiable rewards on 2-digit addition (tiny LM)",
        "arithmetic-grpo",
        ["steps=150", "eval_every=50"],
        minutes=3.0,
    ),
    DemoStep("Over-optimizing a learned reward model (best-of-N)", "rlhf-overoptimization"),
    DemoStep(
        "A tool-using agent learns to follow a two-document search chain (SFT, then GRPO)",
        "doc-search-agent",
        ["steps=10", "eval_every=5"],
        minutes=2.5,
    ),
    DemoStep(
        "AlphaZero-lite self-play on tic-tac-toe",
        "tictactoe-alphazero",
        ["iterations=8", "eval_every=4"],
    ),
    DemoStep("PPO with Ray rollout workers", "cartpole-ppo-ray"),
]


def run_step(step: DemoStep, out: str, log: str) -> dict[str, Any]:
    """Train one step's recipe with its output going to `log`; what the demo prints of it."""
    os.environ["PAYOFF_PROGRESS"] = "0"  # bars belong to a terminal, not to a log file
    from payoff.rollout.evaluate import EvalResult
    from payoff.train import train

    started = time.time()
    with open(log, "w") as stream, redirect_stdout(stream), redirect_stderr(stream):
        try:
            run = train(step.recipe, step.overrides, seed=step.seed, out=out)
        except PayoffError as err:
            print(f"error: {err}", flush=True)
            return {"error": str(err)}
    summary = run.summary()
    lines = []
    if summary.get("final_line"):
        lines.append(str(summary["final_line"]))
    elif "final_eval" in summary and "mean_return" in summary["final_eval"]:
        lines.append(EvalResult(**summary["final_eval"]).line())
    lines += [f"alarm at step {e['step']}: {e['event']['message']}" for e in run.events()]
    return {
        "lines": lines,
        "seconds": time.time() - started,
        "run": str(run.path),
        "report": str(run.media / "report.html"),
    }


def main(out: str = "runs/demo", jobs: int = 2) -> int:
    available = set(recipe_names())
    steps = [s for s in STEPS if s.recipe in available]
    logs = Path(out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.time()
    print(
        f"{len(steps)} recipes, {jobs} at a time (one per core), longest first; each one's "
        f"output goes to {logs}/",
        flush=True,
    )
    results: dict[int, dict[str, Any]] = {}
    order = sorted(range(len(steps)), key=lambda k: -steps[k].minutes)
    # spawn: each step starts from a fresh interpreter (torch, Ray and threads included)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        running: dict[Future, int] = {}
        queue = list(order)

        def start_next() -> None:
            k = queue.pop(0)
            step = steps[k]
            log = logs / f"{k + 1:02d}-{step.recipe}.log"
            command = f"payoff train {step.recipe} {' '.join(step.overrides)}".rstrip()
            print(f"[{k + 1}] {step.title}: {command}  (started; log {log})", flush=True)
            running[pool.submit(run_step, step, out, str(log))] = k

        while queue and len(running) < jobs:
            start_next()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                k = running.pop(future)
                result = results[k] = future.result()
                if "error" in result:
                    print(f"[{k + 1}] error: {result['error']}", file=sys.stderr, flush=True)
                    for pending in running:
                        pending.cancel()
                    return 2
                print(f"[{k + 1}] done in {result['seconds']:.0f} s: {result['run']}", flush=True)
                for line in result["lines"]:
                    print(f"    {line}", flush=True)
                if queue:
                    start_next()
    print(f"\nDemo finished in {time.time() - started:.0f} s. Reports written:")
    for k, step in enumerate(steps):
        print(f"  {step.title}: {results[k]['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
