"""PPO and DQN on CartPole-v1: payoff vs Stable-Baselines3 (rl-zoo hyperparameters), side by side.

Metric: wall-clock seconds of training until the deterministic policy averages >= 475 over
20 evaluation episodes of Gymnasium's CartPole-v1. Both libraries are evaluated by the same
function (payoff.rollout.vector.evaluate_batched) every `eval_every` env steps, and
evaluation time is EXCLUDED from the clock on both sides. Each trial runs in a fresh
subprocess (so peak memory is per trial), alternating payoff / SB3 seed by seed, with
torch.set_num_threads(1) on both sides.

    python benchmarks/cartpole_vs_sb3.py            # 5 seeds each, PPO and DQN
    python benchmarks/cartpole_vs_sb3.py --quick    # 2 seeds each
    python benchmarks/cartpole_vs_sb3.py --only payoff --algos ppo   # iterate on one side
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import markdown_table, worker_result, write_section  # noqa: E402

TARGET = 475.0
EVAL_EPISODES = 20
EVAL_EVERY = {"ppo": 8192, "dqn": 2000}

# rl-zoo (rl-baselines3-zoo hyperparams/*.yml) CartPole-v1 settings.
SB3_PPO = dict(
    n_envs=8,
    n_timesteps=100_000,
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=1e-3,  # linear schedule to 0
    clip_range=0.2,  # linear schedule to 0
)
SB3_DQN = dict(
    n_timesteps=50_000,
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    net_arch=[256, 256],
)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def evaluate(act: Any, seed: int, env_id: str = "CartPole-v1") -> float:
    """Mean return of `act` over EVAL_EPISODES fresh episodes: the same judge for both sides."""
    from payoff.envs.make import EnvConfig
    from payoff.rollout.vector import evaluate_batched

    return evaluate_batched(EnvConfig(env_id), act, EVAL_EPISODES, seed, "sync").mean_return


def sb3_stop_callback(
    every: int,
    target: float,
    seed: int,
    env_id: str = "CartPole-v1",
    time_cap: float | None = None,
) -> Any:
    """An SB3 callback that evaluates every `every` steps (time kept apart) and stops at
    `target`, or unsolved once its training seconds (evaluations excluded) pass `time_cap`."""
    from stable_baselines3.common.callbacks import BaseCallback

    class SolveCallback(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_seconds = 0.0
            self.solved_at: int | None = None
            self.next_eval = every
            self.started = time.perf_counter()
            self.capped = False

        def _on_training_start(self) -> None:
            self.started = time.perf_counter()

        def _on_step(self) -> bool:
            if time_cap is not None:
                trained = time.perf_counter() - self.started - self.eval_seconds
                if trained > time_cap:
                    self.capped = True
                    return False
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += every
            started = time.perf_counter()
            score = evaluate(
                lambda obs: self.model.predict(obs.numpy(), deterministic=True)[0],
                seed + 10_000 + self.num_timesteps,
                env_id,
            )
            self.eval_seconds += time.perf_counter() - started
            if score >= target:
                self.solved_at = self.num_timesteps
                return False
            return True

    return SolveCallback()


def sb3_ppo(env_id: str, p: dict[str, Any], seed: int, device: str = "cpu", **extra: Any) -> Any:
    """SB3's PPO on `p["n_envs"]` DummyVecEnv copies of env_id with rl-zoo's settings `p`."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    return PPO(
        "MlpPolicy",
        make_vec_env(env_id, n_envs=p["n_envs"], seed=seed),
        n_steps=p["n_steps"],
        batch_size=p["batch_size"],
        n_epochs=p["n_epochs"],
        gae_lambda=p["gae_lambda"],
        gamma=p["gamma"],
        ent_coef=p["ent_coef"],
        seed=seed,
        device=device,
        **extra,
    )


def sb3_learn_until_solved(
    model: Any,
    budget: int,
    every: int,
    target: float,
    seed: int,
    env_id: str = "CartPole-v1",
    time_rollouts: bool = True,
    time_cap: float | None = None,
) -> dict[str, Any]:
    """Train an SB3 model until it solves (or spends `budget` steps, or `time_cap` seconds
    of training); the trial's result row, with `capped` true where the time cap stopped it.

    Evaluation time is excluded from the training seconds and from rollout collection
    (collect_rollouts includes the callback's evaluations).
    """
    rollout_seconds = timed_rollouts(model)
    callback = sb3_stop_callback(every, target, seed, env_id, time_cap)
    started = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    seconds = time.perf_counter() - started - callback.eval_seconds
    steps = int(model.num_timesteps)
    collect_seconds = max(rollout_seconds[0] - callback.eval_seconds, 1e-9)
    return {
        "solved": callback.solved_at is not None,
        "capped": callback.capped,
        "seconds": seconds,
        "steps": steps,
        "train_sps": steps / seconds,
        "rollout_sps": steps / collect_seconds if time_rollouts else None,
        "peak_mb": peak_mb(),
    }


def timed_rollouts(model: Any) -> list[float]:
    """Wrap an SB3 model's collect_rollouts; the returned cell accumulates its seconds."""
    seconds = [0.0]
    collect = model.collect_rollouts

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = collect(*args, **kwargs)
        seconds[0] += time.perf_counter() - started
        return result

    model.collect_rollouts = timed
    return seconds


# ---- payoff ------------------------------------------------------------------------------
def timed_payoff_rollouts(agent: Any) -> list[float]:
    """Wrap a PPO agent's rollout collection; the returned cell accumulates its seconds."""
    seconds = [0.0]
    collect = agent.runner.collect

    def timed(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        collect(*args, **kwargs)
        seconds[0] += time.perf_counter() - started

    agent.runner.collect = timed
    return seconds


def payoff_learn_until_solved(agent: Any, time_rollouts: bool = True) -> dict[str, Any]:
    """Train a payoff agent whose config stops at the target; the trial's result row.

    time_rollouts times a PPO agent's rollout collection on its own (DQN interleaves
    updates with collection, so its rollout steps/s is None).
    """
    rollout_seconds = timed_payoff_rollouts(agent) if time_rollouts else [0.0]
    agent.learn()
    return {
        "solved": agent.solved_at is not None,
        "seconds": agent.train_seconds,
        "steps": agent.step,
        "train_sps": agent.step / agent.train_seconds,
        "rollout_sps": agent.step / rollout_seconds[0] if rollout_seconds[0] else None,
        "peak_mb": peak_mb(),
    }


def payoff_budget(algo: str) -> int:
    """total_steps of payoff's shipped recipe."""
    from payoff.recipes import load_recipe

    return int(load_recipe(f"cartpole-{algo}")[1]["total_steps"])


def run_payoff(algo: str, seed: int) -> dict[str, Any]:
    """payoff's shipped recipe (cartpole-ppo / cartpole-dqn), stopping once solved."""
    from payoff import train

    cls, config, _ = train.resolve(
        f"cartpole-{algo}",
        [
            f"eval_every={EVAL_EVERY[algo]}",
            f"eval_episodes={EVAL_EPISODES}",
            f"stop_at_return={TARGET}",
        ],
        seed=seed,
    )
    agent = cls(config=config)
    agent.config.final_eval_episodes = 1
    return payoff_learn_until_solved(agent, time_rollouts=algo == "ppo")


# ---- Stable-Baselines3 ---------------------------------------------------------------------
def run_sb3(algo: str, seed: int) -> dict[str, Any]:
    """SB3 with rl-zoo hyperparameters; a callback evaluates and stops once solved."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    if algo == "ppo":
        p = SB3_PPO

        def linear(start: float) -> Any:
            return lambda remaining: remaining * start

        model: Any = sb3_ppo(
            "CartPole-v1",
            p,
            seed,
            learning_rate=linear(p["learning_rate"]),
            clip_range=linear(p["clip_range"]),
        )
    else:
        p = SB3_DQN
        env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
        model = DQN(
            "MlpPolicy",
            env,
            learning_rate=p["learning_rate"],
            batch_size=p["batch_size"],
            buffer_size=p["buffer_size"],
            learning_starts=p["learning_starts"],
            gamma=p["gamma"],
            target_update_interval=p["target_update_interval"],
            train_freq=p["train_freq"],
            gradient_steps=p["gradient_steps"],
            exploration_fraction=p["exploration_fraction"],
            exploration_final_eps=p["exploration_final_eps"],
            policy_kwargs={"net_arch": p["net_arch"]},
            seed=seed,
            device="cpu",
        )
    return sb3_learn_until_solved(
        model, p["n_timesteps"], EVAL_EVERY[algo], TARGET, seed, time_rollouts=algo == "ppo"
    )


def worker(spec: str) -> None:
    import torch

    torch.set_num_threads(1)
    job = json.loads(spec)
    runner = run_payoff if job["lib"] == "payoff" else run_sb3
    print(json.dumps(runner(job["algo"], job["seed"])))


# ---- the comparison --------------------------------------------------------------------
def trial(lib: str, algo: str, seed: int) -> dict[str, Any]:
    job = {"lib": lib, "algo": algo, "seed": seed}
    return worker_result(__file__, job, f"{algo} {lib:>6} seed {seed}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 seeds instead of 5")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--algos", default="ppo,dqn")
    parser.add_argument(
        "--only",
        choices=("payoff", "sb3"),
        help="run one library only, print its numbers and leave docs/benchmarks.md alone",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    seeds = range(args.seeds or (2 if args.quick else 5))
    load_before = os.getloadavg()[0]
    goals = {"ppo": 8, "dqn": 4}
    rows, notes = [], []
    for algo in args.algos.split(","):
        results: dict[str, list[dict[str, Any]]] = {"payoff": [], "sb3": []}
        libs = (args.only,) if args.only else ("payoff", "sb3")
        for seed in seeds:
            for lib in libs:  # alternate, so machine load hits both alike
                results[lib].append(trial(lib, algo, seed))
        if args.only:  # iterating on one side: its medians, no ratio, no docs
            runs = results[args.only]
            print(
                f"{algo} {args.only}: {sum(r['solved'] for r in runs)}/{len(runs)} solved, median "
                f"{median([r['seconds'] for r in runs]):.2f} s, "
                f"{median([r['steps'] for r in runs]):.0f} steps, "
                f"{median([r['train_sps'] for r in runs]):.0f} steps/s"
            )
            continue
        summary = {}
        for lib, runs in results.items():
            solved = [r for r in runs if r["solved"]]
            summary[lib] = {
                "solved": f"{len(solved)}/{len(runs)}",
                # an unsolved seed counts with its full time: a lower bound on time-to-solve
                "median_s": median([r["seconds"] for r in runs]),
                "median_steps": median([r["steps"] for r in runs]),
                "train_sps": median([r["train_sps"] for r in runs]),
                "rollout_sps": median([r["rollout_sps"] for r in runs if r["rollout_sps"]]),
                "peak_mb": max(r["peak_mb"] for r in runs),
                # two significant figures: payoff's PPO solves in hundredths of a second
                "all_s": ", ".join(f"{r['seconds']:.2g}" for r in runs),
            }
        ratio = summary["payoff"]["median_s"] / summary["sb3"]["median_s"]
        met = (
            ratio <= 1 / goals[algo] and summary["payoff"]["solved"] == f"{len(seeds)}/{len(seeds)}"
        )
        print(
            f"{algo}: payoff/SB3 median time-to-solve ratio {ratio:.3f} (goal <= 1/{goals[algo]}: {'met' if met else 'NOT met'})"
        )
        for lib in ("payoff", "sb3"):
            s = summary[lib]
            rows.append(
                [
                    algo.upper(),
                    "payoff" if lib == "payoff" else "SB3 2.9.2 (rl-zoo)",
                    s["solved"],
                    f"{s['median_s']:.2f}",
                    s["all_s"],
                    f"{s['median_steps']:.0f}",
                    f"{s['train_sps']:.0f}",
                    "—" if s["rollout_sps"] != s["rollout_sps"] else f"{s['rollout_sps']:.0f}",
                    f"{s['peak_mb']:.0f}",
                ]
            )
        notes.append(
            f"- **{algo.upper()}**: payoff / SB3 median time-to-solve = **{ratio:.3f}** "
            f"(1/{1 / ratio:.1f}; goal <= 1/{goals[algo]}: {'met' if met else 'not met'})."
        )
    if args.only:
        return

    table = markdown_table(
        [
            "algo",
            "library",
            "solved",
            "median s to solve",
            "per seed (s)",
            "median steps",
            "train steps/s",
            "rollout steps/s",
            "peak MB",
        ],
        rows,
    )
    load_after = os.getloadavg()[0]
    body = (
        f"Machine load average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the "
        f"end (the benchmark itself keeps one core busy; above ~1.5 other work shared the "
        f"cores, so compare the ratios).\n\n"
        f"Seconds of training until the deterministic policy averages >= {TARGET:.0f} over "
        f"{EVAL_EPISODES} episodes of Gymnasium's CartPole-v1, evaluated every "
        f"{EVAL_EVERY['ppo']} (PPO) / {EVAL_EVERY['dqn']} (DQN) env steps by the same function on "
        f"both sides; evaluation time is excluded on both sides. Seeds alternate payoff / SB3, "
        f"each trial in a fresh process with torch.set_num_threads(1). SB3 uses rl-zoo's tuned "
        f"CartPole-v1 hyperparameters and budget ({SB3_PPO['n_timesteps']} PPO / "
        f"{SB3_DQN['n_timesteps']} DQN steps); payoff uses its shipped recipes cartpole-ppo and "
        f"cartpole-dqn (64 / 8 batched NumPy envs; budgets {payoff_budget('ppo')} / "
        f"{payoff_budget('dqn')} steps). An unsolved seed counts with its full "
        f"training time. Rollout steps/s is collection alone (PPO; DQN interleaves updates).\n\n"
        f"{table}\n\n" + "\n".join(notes)
    )
    path = write_section(
        "cartpole_vs_sb3", "CartPole-v1: payoff vs Stable-Baselines3 (PPO, DQN)", body
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
