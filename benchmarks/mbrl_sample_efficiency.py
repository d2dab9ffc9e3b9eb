"""Sample efficiency on Pendulum-v1: model-based RL (payoff mbrl, PETS-style planning, and
payoff mbpo, SAC on model rollouts) against SAC (Stable-Baselines3, rl-zoo settings) and PPO
(payoff, recipe pendulum-ppo), 3 seeds each.

The claim under test: model-based RL reaches SAC's final return with at most 1/10 of SAC's
environment steps. Two measurements, the same for every method:
- training episodes: the return of each episode the learner plays while it learns, against
  the env steps taken so far;
- evaluations: every EVAL_EVERY env steps, the deterministic policy (mbrl: the planner) on
  the same EVAL_EPISODES episodes, seeded EVAL_SEED + k, for every method, seed and
  evaluation. They are not training data and do not count as env steps. Pendulum's return
  depends on where the pendulum starts (about 0, -120, -240 or -360 for 0 to 3 swings), so
  evaluations on fresh starts differ by tens of points from the starts alone; on one fixed
  set, one evaluation compares with another.
Each run's curves are cached under runs/mbrl-sample-efficiency/ (JSON), so

    python benchmarks/mbrl_sample_efficiency.py            # runs what is not cached, draws
    python benchmarks/mbrl_sample_efficiency.py --only mbrl --rerun   # one method again
    python benchmarks/mbrl_sample_efficiency.py --draw     # redraw from the cache only

(two processes with different --only run side by side: each writes its own cache files).

draws docs/img/mbrl-sample-efficiency.png (return vs env steps, log x) and
docs/img/mbrl-model-error.png (the model's held-out open-loop error vs prediction horizon,
over training), and writes its section of docs/benchmarks.md. Two checks write sections
of their own: --mbpo-model-check (MBPO with its learned model vs the true dynamics) and
--icem-check (the pendulum-mbrl-icem recipe on 3 seeds, docs/img/mbrl-icem-check.png;
cached, so --icem-check --draw redraws it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, markdown_table, write_section  # noqa: E402

CACHE = ROOT / "runs" / "mbrl-sample-efficiency"
IMG = ROOT / "docs" / "img"
SEEDS = (0, 1, 2)
METHODS = ("mbrl", "mbpo", "sac", "ppo")
LABELS = {
    "mbrl": "payoff mbrl (PETS: ensemble + CEM)",
    "mbpo": "payoff mbpo (SAC on 1-step model rollouts)",
    "sac": "SAC (Stable-Baselines3 2.9, rl-zoo settings)",
    "ppo": "PPO (payoff, recipe pendulum-ppo)",
}
MBRL_STEPS = 1_000  # 5 episodes
MBPO_STEPS = 3_000  # the pendulum-mbpo recipe's budget
EVAL_EVERY = 200  # env steps between evaluations (one Pendulum episode)
EVAL_EPISODES = 10
EVAL_SEED = 1_000_000  # every evaluation of every method plays the episodes seeded 1e6 + k
SAC_STEPS = 20_000  # rl-zoo's budget for SAC on Pendulum-v1
PPO_STEPS = 200_000  # the pendulum-ppo recipe's budget


def _payoff_curve(
    recipe: str, seed: int, overrides: list[str], prepare: Any = None
) -> tuple[list, Any]:
    """Train a payoff recipe; every training episode's (env steps, return). `prepare` is
    called with the agent before it learns."""
    import torch

    from payoff import train

    torch.set_num_threads(1)
    cls, config, _ = train.resolve(
        recipe, ["threads=1", f"eval_episodes={EVAL_EPISODES}", *overrides], seed=seed
    )
    agent = cls(config=config)
    # Periodic evaluations on the benchmark's fixed episodes (payoff's own draw fresh ones).
    evaluate = agent.evaluate
    agent.evaluate = lambda episodes=100, seed=None: evaluate(episodes, EVAL_SEED)
    curve: list[tuple[int, float]] = []
    drain = agent.runner.drain_episodes

    def drain_and_record() -> tuple[list[float], list[int]]:
        returns, lengths = drain()
        # the loop drains at each log; these episodes ended by the current step
        curve.extend((int(agent.step), float(r)) for r in returns)
        return returns, lengths

    agent.runner.drain_episodes = drain_and_record
    if prepare is not None:
        prepare(agent)
    agent.learn()
    return curve, agent


def _evals(agent: Any) -> list[list[float]]:
    """[step, mean return] of each periodic evaluation of a payoff run."""
    return [[r["step"], r["eval/mean_return"]] for r in agent.history if "eval/mean_return" in r]


def run_mbrl(seed: int) -> dict[str, Any]:
    curve, agent = _payoff_curve(
        "pendulum-mbrl",
        seed,
        [f"total_steps={MBRL_STEPS}", "final_eval_episodes=1", f"eval_every={EVAL_EVERY}"],
    )
    records = [r for r in agent.history if "train/planned_return" in r]
    return {
        "curve": curve,
        "evals": _evals(agent),
        "model_errors": agent.model_errors,
        "plan": [
            [r["step"], r["train/planned_return"], r["train/realized_return"]] for r in records
        ],
        "disagreement": [
            [r["step"], r["train/model_disagreement"]]
            for r in agent.history
            if "train/model_disagreement" in r
        ],
    }


def run_mbpo(seed: int) -> dict[str, Any]:
    curve, agent = _payoff_curve(
        "pendulum-mbpo",
        seed,
        [f"total_steps={MBPO_STEPS}", "final_eval_episodes=1", f"eval_every={EVAL_EVERY}"],
    )
    return {
        "curve": curve,
        "evals": _evals(agent),
        "disagreement": [
            [r["step"], r["train/model_disagreement"]]
            for r in agent.history
            if "train/model_disagreement" in r
        ],
    }


def run_ppo(seed: int) -> dict[str, Any]:
    # PPO needs ~100x the steps: evaluated every 10,000 of them
    curve, agent = _payoff_curve(
        "pendulum-ppo",
        seed,
        [f"total_steps={PPO_STEPS}", "final_eval_episodes=1", "eval_every=10000"],
    )
    return {"curve": curve, "evals": _evals(agent)}


def run_sac(seed: int) -> dict[str, Any]:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    from payoff.envs.make import EnvConfig
    from payoff.rollout.vector import evaluate_batched

    torch.set_num_threads(1)
    curve: list[tuple[int, float]] = []
    evals: list[list[float]] = []

    class Record(BaseCallback):
        """Every training episode, and every EVAL_EVERY steps an evaluation of the
        deterministic policy on the benchmark's fixed episodes, by payoff's evaluation code
        (the same episodes and seeds as the payoff runs: SB3's EvalCallback would draw
        fresh ones)."""

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    curve.append((int(self.num_timesteps), float(info["episode"]["r"])))
            if self.num_timesteps % EVAL_EVERY == 0:
                result = evaluate_batched(
                    EnvConfig(id="Pendulum-v1"),
                    lambda obs: self.model.predict(obs.numpy(), deterministic=True)[0],
                    EVAL_EPISODES,
                    EVAL_SEED,
                )
                evals.append([int(self.num_timesteps), result.mean_return])
            return True

    # rl-zoo hyperparams/sac.yml, Pendulum-v1: MlpPolicy, learning_rate 1e-3, 20k steps
    # (the rest SB3's defaults: buffer 1e6, batch 256, learning_starts 100, train_freq 1).
    model = SAC("MlpPolicy", "Pendulum-v1", learning_rate=1e-3, seed=seed, device="cpu")
    model.learn(SAC_STEPS, callback=Record())
    return {"curve": curve, "evals": evals}


RUNNERS = {"mbrl": run_mbrl, "mbpo": run_mbpo, "sac": run_sac, "ppo": run_ppo}

# The planner's own ceiling: mbrl's planner given Pendulum's true dynamics and reward.
WIDER_SEARCH = {"horizon": 30, "population": 500, "iterations": 5, "elites": 50}
# The improved CEM (iCEM, Pinneri et al. 2020): colored noise, elites kept across iterations
# and steps, acting with the best sequence scored. 40 x 300 x 3 model rows per step.
ICEM_SEARCH = {
    "horizon": 40,
    "population": 300,
    "iterations": 3,
    "elites": 30,
    "init_std": 1.0,
    "noise_beta": 2.0,
    "keep_elites": 0.3,
    "act": "best",
}
# The recipe that plans with iCEM through its learned model: ICEM_SEARCH acting with the
# elites' mean, each member's mean next state, its model fitted 2,000 steps per refit.
ICEM_RECIPE = "pendulum-mbrl-icem"


class PendulumPhysics:
    """Pendulum-v1's dynamics and reward (gymnasium's pendulum.py) in the shape of a
    one-member DynamicsEnsemble: inputs [E, N, (cos, sin, theta_dot, torque)] -> mean of
    (change of the observation, reward, terminated) and a zero std."""

    members, obs_dim = 1, 3

    def __init__(self) -> None:
        import torch

        self.in_mean, self.in_std = torch.zeros(4), torch.ones(4)

    def __call__(self, inputs: Any) -> Any:
        import torch

        cos, sin, speed = inputs[..., 0], inputs[..., 1], inputs[..., 2]
        torque = inputs[..., 3].clamp(-2.0, 2.0)
        theta = torch.atan2(sin, cos)
        reward = -(theta**2 + 0.1 * speed**2 + 0.001 * torque**2)
        new_speed = (speed + (15.0 * torch.sin(theta) + 3.0 * torque) * 0.05).clamp(-8.0, 8.0)
        new_theta = theta + new_speed * 0.05
        mean = torch.stack(
            [
                torch.cos(new_theta) - cos,
                torch.sin(new_theta) - sin,
                new_speed - speed,
                reward,
                torch.zeros_like(cos),
            ],
            -1,
        )
        return mean, torch.zeros_like(mean)


class PendulumPhysicsScaled(PendulumPhysics):
    """PendulumPhysics for MBPO's model inputs, whose action is scaled to [-1, 1]."""

    def __call__(self, inputs: Any) -> Any:
        import torch

        # Pendulum-v1's action space is [-2, 2]
        return super().__call__(torch.cat([inputs[..., :3], 2.0 * inputs[..., 3:4]], -1))


def imagine_with_true_dynamics(agent: Any) -> None:
    """Make an MBPO agent imagine its rollouts through Pendulum's true dynamics and reward:
    the same algorithm with a perfect model (the learned one is still fitted, and unused)."""
    physics, imagine = PendulumPhysicsScaled(), agent.imagine

    def perfect() -> None:
        learned, agent.model = agent.model, physics
        try:
            imagine()
        finally:
            agent.model = learned

    agent.imagine = perfect


MODEL_CHECK_STEPS = 1_600


def run_mbpo_model_check(job: tuple[int, bool]) -> dict[str, Any]:
    """pendulum-mbpo for MODEL_CHECK_STEPS steps, its rollouts through the learned model or
    (perfect) through the true dynamics: [step, evaluation] pairs."""
    seed, perfect = job
    _, agent = _payoff_curve(
        "pendulum-mbpo",
        seed,
        [
            f"total_steps={MODEL_CHECK_STEPS}",
            "final_eval_episodes=1",
            f"eval_every={EVAL_EVERY}",
        ],
        imagine_with_true_dynamics if perfect else None,
    )
    return {"seed": seed, "perfect": perfect, "evals": _evals(agent)}


def mbpo_model_check(jobs: int) -> None:
    """Is it the model that holds MBPO short of SAC's final evaluation level? The recipe
    with its learned model against the same recipe imagining through the true dynamics."""
    from concurrent.futures import ProcessPoolExecutor

    runs = [(seed, perfect) for seed in SEEDS for perfect in (False, True)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(run_mbpo_model_check, runs))
    steps = [int(step) for step, _ in results[0]["evals"]]
    rows = [
        [
            "true dynamics and reward" if r["perfect"] else "learned ensemble (the recipe)",
            r["seed"],
            *(f"{value:.1f}" for _, value in r["evals"]),
        ]
        for r in sorted(results, key=lambda r: (r["perfect"], r["seed"]))
    ]
    table = markdown_table(["MBPO's rollouts through", "seed", *map(str, steps)], rows)
    print(table)
    best = {
        perfect: [
            max(v for s, v in r["evals"] if s >= 1_000) for r in results if r["perfect"] == perfect
        ]
        for perfect in (False, True)
    }
    body = f"""
The pendulum-mbpo recipe for {MODEL_CHECK_STEPS:,} env steps, evaluated every {EVAL_EVERY}
steps on the same {EVAL_EPISODES} episodes as above (seeded {EVAL_SEED:,} + k), with its
rollouts imagined through its learned ensemble, and again through Pendulum's true dynamics
and reward (a perfect model; everything else the same). Evaluation by env steps:

{table}

Best evaluation from 1,000 steps on, by seed: learned model {", ".join(f"{v:.1f}" for v in best[False])};
true dynamics {", ".join(f"{v:.1f}" for v in best[True])}. SAC's final evaluation level is
-143.7 (the section above).
"""
    write_section(
        "mbpo_model_check", "Model-based RL: MBPO with its learned model vs a perfect one", body
    )


def planner_ceiling() -> dict[str, Any]:
    """The evaluation's mean return when mbrl's planner plans with the true dynamics and
    reward (what a perfect model would give), with each search: pendulum-mbrl's, a wider
    PETS search, ICEM_SEARCH and ICEM_RECIPE's."""
    import torch

    from payoff import train
    from payoff.algos.mbrl import Planner
    from payoff.rollout.vector import evaluate_batched

    torch.set_num_threads(1)
    _, config, _ = train.resolve("pendulum-mbrl", [], seed=0)
    results: dict[str, Any] = {"protocol": PROTOCOL}
    _, learned, _ = train.resolve(ICEM_RECIPE, [], seed=0)
    searches = {
        "recipe": config.planner,
        "wider": dataclasses.replace(config.planner, **WIDER_SEARCH),
        "icem": dataclasses.replace(config.planner, **ICEM_SEARCH),
        "icem_learned": learned.planner,  # the iCEM check's runs plan with this search
    }
    for name, settings in searches.items():
        planner = Planner(PendulumPhysics(), pendulum_action_space(), settings)  # type: ignore[arg-type]
        generator = torch.Generator().manual_seed(0)
        result = evaluate_batched(
            config.env,
            lambda obs: planner.plan(obs.float(), generator, report=False)[0],  # noqa: B023
            EVAL_EPISODES,
            EVAL_SEED,
        )
        results[name] = result.mean_return
        results[f"{name}_search"] = search_text(settings)
    return results


def search_text(settings: Any) -> str:
    """A planner's search in words."""
    text = (
        f"horizon {settings.horizon}, {settings.population} samples, "
        f"{settings.iterations} iterations"
    )
    if settings.icem:
        text += (
            f", iCEM: noise 1/f^{settings.noise_beta:g}, {settings.keep_elites:.0%} of the "
            f"elites kept, acting with the {settings.act} sequence"
        )
    if not settings.sample:
        text += ", each member's mean next state"
    return text


def run_icem_check(seed: int) -> dict[str, Any]:
    """ICEM_RECIPE for MBRL_STEPS steps, then its final evaluation on the benchmark's
    episodes (one evaluation: each costs as much as the whole training)."""
    started = time.time()
    curve, agent = _payoff_curve(
        ICEM_RECIPE,
        seed,
        [
            f"total_steps={MBRL_STEPS}",
            f"final_eval_episodes={EVAL_EPISODES}",  # on EVAL_SEED: _payoff_curve's evaluate
            "eval_every=0",
        ],
    )
    final = next(r for r in agent.history if "final/mean_return" in r)
    return {
        "seed": seed,
        "final": final["final/mean_return"],
        "curve": curve,
        "seconds": time.time() - started,
        "search": search_text(agent.config.planner),
        "fit_steps": agent.config.fit_steps,
    }


# Measured in the first section (2026-11-27): SAC's final evaluation level (-143.7 there;
# its strictest value that rounds to -143.7 here) and the mean over seeds of the first SAC
# evaluation at that level (9,600, 13,600 and 8,200 steps).
SAC_EVAL_LEVEL = -143.65
SAC_EVAL_STEPS = 10_467


def icem_check(jobs: int, draw_only: bool) -> None:
    """Does a better search lift mbrl to SAC's final evaluation level? ICEM_RECIPE on 3
    seeds, and the searches' ceilings with the true dynamics; with draw_only, the section
    and figure again from the cached runs."""
    from concurrent.futures import ProcessPoolExecutor

    from payoff import train

    path = CACHE / "icem-check.json"
    if draw_only:
        if not path.exists():
            print(f"not drawing: no cached runs at {path}; run --icem-check without --draw")
            return
        cache = json.loads(path.read_text())
    else:
        with ProcessPoolExecutor(jobs) as pool:
            runs = [pool.submit(run_icem_check, seed) for seed in SEEDS]
            ceiling_run = pool.submit(planner_ceiling)  # beside the last seed
            cache = {"runs": [run.result() for run in runs], "ceiling": ceiling_run.result()}
        cache["measured"] = time.strftime("%Y-%m-%d %H:%M")
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache))
    results, ceiling = cache["runs"], cache["ceiling"]
    # caches written before "measured" was kept: the file's time
    measured = cache.get("measured") or time.strftime(
        "%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime)
    )
    _, recipe_config, _ = train.resolve("pendulum-mbrl", [], seed=0)
    at_level = sum(r["final"] >= SAC_EVAL_LEVEL for r in results)
    met = at_level == len(results)
    figure = draw_icem_check(results, ceiling, met)
    rows = [
        [
            r["seed"],
            ", ".join(f"{value:.0f}" for _, value in r["curve"]),
            f"{r['final']:.1f}",
            f"{r['seconds'] / 60:.0f}",
        ]
        for r in results
    ]
    table = markdown_table(
        ["seed", "training episodes' returns", f"evaluation at {MBRL_STEPS:,} steps", "minutes"],
        rows,
    )
    print(table)
    if met:
        verdict = (
            f"every seed is at SAC's level by {MBRL_STEPS:,} steps, so mbrl's mean steps to it "
            f"are at most {MBRL_STEPS:,}: **at most {MBRL_STEPS / SAC_EVAL_STEPS:.3f} of SAC's "
            f"{SAC_EVAL_STEPS:,}** (the claim: at most 0.1)"
        )
    else:
        verdict = (
            f"{at_level} of {len(results)} seeds are at SAC's level at {MBRL_STEPS:,} steps "
            f"(the best: {max(r['final'] for r in results):.1f})"
        )
    print(verdict)
    body = f"""
The {ICEM_RECIPE} recipe for {MBRL_STEPS:,} env steps (5 episodes: 200 random steps, then
planning): pendulum-mbrl with its planner's search changed to iCEM ({results[0]["search"]})
and its model fitted {results[0]["fit_steps"]:,} gradient steps per refit (pendulum-mbrl:
{recipe_config.fit_steps:,}). Then one evaluation on the same {EVAL_EPISODES} episodes as
above (seeded {EVAL_SEED:,} + k), planned in one batch. Only one: with this search an
evaluation costs as much compute as the whole training. Runs measured {measured};
minutes: wall time on the shared 2-core machine, beside whatever else ran there.

{table}

SAC's final evaluation level is {SAC_EVAL_LEVEL} (the first section's -143.7, taken at its
strictest), first reached by SAC's evaluations at {SAC_EVAL_STEPS:,} steps on the mean over
seeds. Here {verdict}.

The same searches with Pendulum's true dynamics and reward in place of the model, on the
same episodes (what each would score with a perfect model):

| search | evaluation |
|---|---|
| {ceiling["recipe_search"]} (pendulum-mbrl) | {ceiling["recipe"]:.1f} |
| {ceiling["wider_search"]} | {ceiling["wider"]:.1f} |
| {ceiling["icem_search"]} | {ceiling["icem"]:.1f} |
| {ceiling["icem_learned_search"]} ({ICEM_RECIPE}: the runs above) | {ceiling["icem_learned"]:.1f} |

Figure: {figure.relative_to(ROOT)} (the runs' training episodes and evaluations against SAC's
level and steps, and the same search with the true dynamics). The runs are cached in
{(CACHE / "icem-check.json").relative_to(ROOT)}: `--icem-check` runs them (here with
`--jobs 2`), `--icem-check --draw` writes this section and the figure again from the cache.
"""
    write_section("mbrl_icem_check", "Model-based RL: PETS's CEM vs iCEM on Pendulum", body)


def save_figure(fig: Any, name: str) -> Path:
    """Lay out, save under docs/img and close a figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = IMG / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_icem_check(results: list[dict[str, Any]], ceiling: dict[str, Any], met: bool) -> Path:
    """The iCEM check's runs: training episodes and the evaluation at MBRL_STEPS, against
    SAC's final evaluation level and the steps SAC's evaluations take to reach it, and the
    same search with the true dynamics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
    seeds = ", ".join(str(run["seed"]) for run in results)
    for i, run in enumerate(results):
        steps, returns = zip(*run["curve"], strict=True)
        left.plot(
            steps,
            returns,
            color="tab:red",
            alpha=0.35 + 0.2 * i,
            marker="o",
            ms=3,
            label=f"{ICEM_RECIPE}: training episodes" if i == 0 else None,
        )
    for ax in (left, right):
        for j, run in enumerate(results):
            ax.plot(
                [MBRL_STEPS * (0.97 + 0.03 * j)],
                [run["final"]],
                "*",
                color="darkred",
                ms=12,
                alpha=0.7,
                label=f"its evaluation at {MBRL_STEPS:,} steps, seeds {seeds}" if j == 0 else None,
            )
        ax.axhline(
            SAC_EVAL_LEVEL,
            color="tab:blue",
            ls="--",
            lw=1,
            label=f"SAC's final evaluation level ({SAC_EVAL_LEVEL})",
        )
        ax.axvline(
            SAC_EVAL_STEPS,
            color="tab:blue",
            ls=":",
            lw=1.5,
            label=f"SAC first evaluates at that level ({SAC_EVAL_STEPS:,} steps)",
        )
        ax.axvline(
            SAC_EVAL_STEPS / 10,
            color="gray",
            ls=":",
            lw=1,
            label=f"1/10 of SAC's steps ({SAC_EVAL_STEPS / 10:,.0f})",
        )
        ax.set_xscale("log")
        ax.set_xlim(150, 20_000)
        ax.set_xlabel("real environment steps (log scale)")
        ax.grid(alpha=0.3)
    left.set_ylabel("return")
    left.set_title("training episodes and evaluation", fontsize=10)
    right.axhline(
        ceiling["icem_learned"],
        color="tab:green",
        ls="-.",
        lw=1,
        label=f"the same search with the true dynamics ({ceiling['icem_learned']:.1f})",
    )
    right.set_ylim(SAC_EVAL_LEVEL - 8, SAC_EVAL_LEVEL + 8)
    left.legend(loc="lower right", fontsize=8)
    right.set_title(
        f"near SAC's level: evaluations on the same {EVAL_EPISODES} episodes", fontsize=10
    )
    right.legend(loc="lower left", fontsize=8)
    fig.suptitle(
        f"Pendulum-v1: {ICEM_RECIPE} "
        + ("at" if met else "against")
        + f" SAC's final evaluation level after {MBRL_STEPS:,} env steps"
    )
    return save_figure(fig, "mbrl-icem-check.png")


def pendulum_action_space() -> Any:
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    env.close()
    return env.action_space


# How the cached runs were evaluated: a cache measured another way is measured again.
PROTOCOL = {"eval_episodes": EVAL_EPISODES, "eval_seed": EVAL_SEED, "eval_every": EVAL_EVERY}


def load_cached(path: Path) -> dict[str, Any] | None:
    """A cached result measured under this PROTOCOL, else None."""
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if result.get("protocol") != PROTOCOL:
        print(f"{path.name}: measured under another evaluation protocol; not used")
        return None
    return result


def cached(method: str, seed: int, rerun: bool) -> dict[str, Any]:
    path = CACHE / f"{method}-seed{seed}.json"
    result = None if rerun else load_cached(path)
    if result is not None:
        return result
    started = time.perf_counter()
    result = RUNNERS[method](seed)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["protocol"] = PROTOCOL
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    print(f"{method} seed {seed}: {len(result['curve'])} episodes in {result['seconds']} s")
    return result


# ---- analysis -----------------------------------------------------------------------------
def smoothed(curve: list, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, running mean of the last `window` returns)."""
    steps = np.array([s for s, _ in curve], dtype=float)
    returns = np.array([r for _, r in curve], dtype=float)
    means = np.array([returns[max(0, i - window + 1) : i + 1].mean() for i in range(len(returns))])
    return steps, means


def first_reaching(curve: list, level: float, window: int = 1) -> int | None:
    """Env steps at which the running mean of `window` returns first reaches `level`."""
    steps, means = smoothed(curve, window)
    hit = np.flatnonzero(means >= level)
    return int(steps[hit[0]]) if len(hit) else None


def final_return(curve: list, last: int) -> float:
    return float(np.mean([r for _, r in curve[-last:]]))


# Training episodes are noisy (random starts): SAC's, PPO's and mbpo's are averaged 5 at a
# time; mbrl has 5 in all, so its own count one by one (kinder to mbrl).
WINDOW = {"mbrl": 1, "mbpo": 5, "sac": 5, "ppo": 5}


def analyse(results: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """The table, and per method the steps to SAC's final level under both measurements."""
    # SAC's final level: its last 10 training episodes / its last 5 evaluations, over seeds.
    sac_final = float(np.mean([final_return(r["curve"], 10) for r in results["sac"]]))
    sac_eval_final = float(np.mean([final_return(r["evals"], 5) for r in results["sac"]]))
    rows, numbers = [], {"sac_final": sac_final, "sac_eval_final": sac_eval_final}
    for method in METHODS:
        for run, seed in zip(results[method], SEEDS, strict=True):
            curve, evals = run["curve"], run["evals"]
            train_steps = first_reaching(curve, sac_final, WINDOW[method])
            eval_steps = first_reaching(evals, sac_eval_final)
            rows.append(
                [
                    LABELS[method],
                    seed,
                    curve[-1][0],
                    round(final_return(evals, 5 if method in ("sac", "mbpo") else 1), 1),
                    train_steps or "not reached",
                    eval_steps or "not reached",
                    run.get("seconds", ""),
                ]
            )
            numbers.setdefault(method, []).append(train_steps)
            numbers.setdefault(f"{method}_eval", []).append(eval_steps)
            numbers.setdefault(f"{method}_single", []).append(first_reaching(curve, sac_final))
    header = [
        "method",
        "seed",
        "env steps",
        "final evaluation",
        "steps to SAC's final level: training episodes",
        "steps to SAC's final level: evaluations",
        "seconds",
    ]
    return markdown_table(header, rows), numbers


def ratio(numbers: dict[str, Any], method: str, sac_key: str, suffix: str = "") -> str:
    """mean steps of `method` / mean steps of SAC, when every seed got there."""
    ours = numbers[f"{method}{suffix}"]
    sac_steps = [s for s in numbers[sac_key] if s is not None]
    if not sac_steps or None in ours:
        return "n/a (not every seed reached it)"
    return (
        f"{np.mean(ours):.0f} / {np.mean(sac_steps):.0f} = {np.mean(ours) / np.mean(sac_steps):.3f}"
    )


# ---- figures --------------------------------------------------------------------------------
COLORS = {"mbrl": "tab:red", "mbpo": "tab:orange", "sac": "tab:blue", "ppo": "tab:green"}


def draw(results: dict[str, list[dict[str, Any]]], numbers: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for method in METHODS:
        for i, run in enumerate(results[method]):
            label = LABELS[method] if i == 0 else None
            marker = "o" if method == "mbrl" else None
            steps, means = smoothed(run["curve"], WINDOW[method])
            left.plot(
                steps, means, color=COLORS[method], alpha=0.8, marker=marker, ms=4, label=label
            )
            steps, means = smoothed(run["evals"], 1)
            right.plot(
                steps, means, color=COLORS[method], alpha=0.8, marker=marker, ms=4, label=label
            )
    for ax, level, title in (
        (left, numbers["sac_final"], "training episodes (mbpo, SAC, PPO: mean of 5)"),
        (right, numbers["sac_eval_final"], f"evaluations: {EVAL_EPISODES} episodes, deterministic"),
    ):
        ax.axhline(level, color="gray", ls="--", lw=1, label=f"SAC's final level ({level:.0f})")
        ax.set_xscale("log")
        ax.set_xlabel("real environment steps (log scale)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    left.set_ylabel("return")
    right.legend(loc="lower right", fontsize=8)
    fig.suptitle("Pendulum-v1, 3 seeds each: return vs real environment steps")
    efficiency = save_figure(fig, "mbrl-sample-efficiency.png")

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    cmap = plt.get_cmap("viridis")
    errors = results["mbrl"][0]["model_errors"]  # seed 0: [step, [mse at 1..K]]
    for j, (step, curve) in enumerate(errors):
        left.plot(
            range(1, len(curve) + 1),
            curve,
            color=cmap(j / max(1, len(errors) - 1)),
            marker=".",
            label=f"after {step} steps",
        )
    left.set_yscale("log")
    left.set_xlabel("open-loop prediction horizon k (steps)")
    left.set_ylabel("MSE of the predicted observation")
    left.set_title("held-out error vs horizon (mbrl, seed 0)")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    for run, seed in zip(results["mbrl"], SEEDS, strict=True):
        steps = [s for s, _ in run["model_errors"]]
        right.plot(
            steps,
            [errors[0] for _, errors in run["model_errors"]],
            color="tab:red",
            alpha=0.4 + 0.2 * seed,
            label=f"1 step, seed {seed}",
        )
        right.plot(
            steps,
            [errors[-1] for _, errors in run["model_errors"]],
            color="tab:purple",
            alpha=0.4 + 0.2 * seed,
            ls="--",
            label=f"{len(run['model_errors'][0][1])} steps, seed {seed}",
        )
    right.set_yscale("log")
    right.set_xlabel("environment steps")
    right.set_title("held-out 1- and 10-step error over training (mbrl)")
    right.legend(fontsize=7)
    right.grid(alpha=0.3)
    model_error = save_figure(fig, "mbrl-model-error.png")
    return [efficiency, model_error]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=METHODS, action="append", help="run only these")
    parser.add_argument("--rerun", action="store_true", help="ignore cached curves")
    parser.add_argument("--draw", action="store_true", help="draw from the cache only")
    parser.add_argument(
        "--mbpo-model-check",
        action="store_true",
        help="only: MBPO with its learned model vs the true dynamics (3 seeds, its own section)",
    )
    parser.add_argument(
        "--icem-check",
        action="store_true",
        help=f"only: {ICEM_RECIPE} (3 seeds, its own section; with --draw: from its cache)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="processes for the checks")
    args = parser.parse_args()
    if args.mbpo_model_check:
        mbpo_model_check(args.jobs)
        return
    if args.icem_check:
        icem_check(args.jobs, args.draw)
        return
    wanted = args.only or list(METHODS)
    results: dict[str, list[dict[str, Any]]] = {}
    for method in METHODS:
        results[method] = []
        for seed in SEEDS:
            path = CACHE / f"{method}-seed{seed}.json"
            if args.draw or method not in wanted:
                if (result := load_cached(path)) is not None:
                    results[method].append(result)
                continue
            results[method].append(cached(method, seed, args.rerun))
    missing = [m for m in METHODS if len(results[m]) != len(SEEDS)]
    if missing:
        print(f"not drawing: no cached curves yet for {', '.join(missing)}")
        return
    table, numbers = analyse(results)
    print(table)
    draw(results, numbers)
    lines = []
    for method in ("mbrl", "mbpo"):
        lines.append(
            f"- {method} / SAC: evaluations **{ratio(numbers, method, 'sac_eval', '_eval')}**; "
            f"training episodes {ratio(numbers, method, 'sac')} (SAC's running mean of 5), "
            f"{ratio(numbers, method, 'sac_single', '')} (SAC's first single episode at the "
            f"level: kinder to SAC); against SAC's whole rl-zoo budget of {SAC_STEPS:,} steps "
            f"{np.mean(numbers[method]) / SAC_STEPS:.3f}"
            if None not in numbers[method]
            else f"- {method}: not every seed reached SAC's final level"
        )
        print(lines[-1])
    ceiling_path = CACHE / "planner-ceiling.json"
    ceiling = None if args.rerun else load_cached(ceiling_path)
    if ceiling is None and not args.draw:
        ceiling = planner_ceiling()
        ceiling_path.write_text(json.dumps(ceiling))
    ceiling_text = (
        f"""
**The planner's ceiling.** mbrl's planner with Pendulum's true dynamics and reward in place of
the learned model evaluates at **{ceiling["recipe"]:.1f}** on the same {EVAL_EPISODES} episodes with the
recipe's search ({ceiling["recipe_search"]}), and at **{ceiling["wider"]:.1f}** with a wider
search ({ceiling["wider_search"]}): what the planner would score with a perfect model.
"""
        if ceiling
        else ""
    )
    per_step = {
        m: np.mean([r["seconds"] / r["curve"][-1][0] for r in results[m]])
        for m in ("mbrl", "mbpo", "sac")
    }
    body = f"""
Pendulum-v1, 3 seeds per method, two measurements of the same runs. **Training episodes**:
the return of each episode the learner plays while it learns, against the env steps so far.
**Evaluations**: every {EVAL_EVERY} env steps, the deterministic policy (mbrl: its planner)
on the same {EVAL_EPISODES} episodes (seeded {EVAL_SEED:,} + k: the same starting states
for every method, seed and evaluation; by payoff's evaluation code for SAC too). They are
not training data. SAC is Stable-Baselines3 2.9's SAC with rl-zoo's Pendulum-v1 settings
(learning_rate 1e-3, the rest SB3's defaults) for {SAC_STEPS:,} steps; PPO is payoff's
pendulum-ppo recipe ({PPO_STEPS:,} steps); mbrl is payoff's pendulum-mbrl recipe
({MBRL_STEPS:,} steps); mbpo is payoff's pendulum-mbpo recipe ({MBPO_STEPS:,} steps).
"SAC's final level": the mean over seeds of SAC's last 10 training episodes
(**{numbers["sac_final"]:.1f}**) or of its last 5 evaluations (**{numbers["sac_eval_final"]:.1f}**).
Steps to reach it: the first training step where the running mean of 5 training episodes
(mbrl: the episode itself) is at that level, or the first evaluation at that level.

{table}

Steps to SAC's final level, mean over seeds, model-based / SAC (the claim under test is at
most 0.1):

{chr(10).join(lines)}

Figures: docs/img/mbrl-sample-efficiency.png, docs/img/mbrl-model-error.png. The curves
are cached in runs/mbrl-sample-efficiency/ (run the script without --draw to measure them
again). Wall time tells the other side: mbrl plans through the model at every step
({per_step["mbrl"]:.2f} s per env step here, evaluations included), mbpo runs 10 SAC
updates per env step and refits its model every 200 ({per_step["mbpo"]:.3f} s), SAC
{per_step["sac"]:.3f} s (the same shared 2-core machine). Model-based RL saves env steps,
not compute.
{ceiling_text}"""
    write_section("mbrl_sample_efficiency", "Model-based RL: sample efficiency on Pendulum", body)


if __name__ == "__main__":
    main()
