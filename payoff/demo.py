"""`make demo`: the headline recipe of every landed capability, shortened to a few minutes on 2 cores.

Each step trains one recipe into runs/demo/, writes its report, and the demo ends by
naming the reports it wrote.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from payoff.core.errors import PayoffError
from payoff.recipes import recipe_names


@dataclass
class DemoStep:
    title: str
    recipe: str
    overrides: list[str] = field(default_factory=list)
    seed: int = 0


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
    ),
    DemoStep(
        "GRPO (DAPO loss, dynamic sampling) with verifiable rewards on 2-digit addition (tiny LM)",
        "arithmetic-grpo",
        ["steps=150", "eval_every=50"],
    ),
    DemoStep("Over-optimizing a learned reward model (best-of-N)", "rlhf-overoptimization"),
    DemoStep(
        "A tool-using agent learns to follow a two-document search chain (SFT, then GRPO)",
        "doc-search-agent",
        ["steps=10", "eval_every=5"],
    ),
    DemoStep(
        "AlphaZero-lite self-play on tic-tac-toe",
        "tictactoe-alphazero",
        ["iterations=8", "eval_every=4"],
    ),
    DemoStep("PPO with Ray rollout workers", "cartpole-ppo-ray"),
]


def main(out: str = "runs/demo") -> int:
    available = set(recipe_names())
    reports: list[tuple[str, str]] = []
    started = time.time()
    from payoff.rollout.evaluate import EvalResult
    from payoff.train import train

    for number, step in enumerate((s for s in STEPS if s.recipe in available), start=1):
        print(
            f"\n[{number}] {step.title}: payoff train {step.recipe} {' '.join(step.overrides)}".rstrip(),
            flush=True,
        )
        t0 = time.time()
        try:
            run = train(step.recipe, step.overrides, seed=step.seed, out=out)
        except PayoffError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        summary = run.summary()
        if summary.get("final_line"):
            print(f"    {summary['final_line']}")
        elif "final_eval" in summary and "mean_return" in summary["final_eval"]:
            print(f"    {EvalResult(**summary['final_eval']).line()}")
        for event in run.events():
            print(f"    alarm at step {event['step']}: {event['event']['message']}")
        print(f"    done in {time.time() - t0:.0f} s; run: {run.path}")
        reports.append((step.title, str(run.media / "report.html")))
    print(f"\nDemo finished in {time.time() - started:.0f} s. Reports written:")
    for title, path in reports:
        print(f"  {title}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
