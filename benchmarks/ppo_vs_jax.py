"""PPO on CartPole-v1: payoff vs a whole training loop compiled by XLA (JAX, PureJaxRL style).

The JAX side is our own PPO written the PureJaxRL way (https://github.com/luchris429/purejaxrl):
gymnax's CartPole-v1 stepped inside `jax.lax.scan`, flax actor and critic, optax Adam, and
rollout, GAE and the minibatch update of every iteration all in one `jax.jit`. It uses
the hyperparameters of payoff's `cartpole-ppo` recipe, read from the recipe itself
(64 envs x 32 steps, one epoch of 4 minibatches of 512, lr 1e-2, clip 0.2, gamma 0.99,
GAE 0.95, vf_coef 0.5, max_grad_norm 0.5, Adam eps 1e-5, tanh 64-64 actor and critic
with orthogonal init, advantages normalized per minibatch) and payoff's algorithm:
time-limit truncations bootstrap from V(final observation), terminations do not.

One thread each: every trial runs in a fresh process pinned to one CPU
(`os.sched_setaffinity`, what `taskset -c 0` does), torch with set_num_threads(1), and
XLA with XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
set before jax is imported. Trials alternate payoff / JAX seed by seed.

Measured per seed:
  - JAX, whole loop: compile seconds (trace + XLA compile of the 146-update loop) and
    env steps/s of the compiled loop (rollout + update, like PureJaxRL's ppo.py); and the
    steps/s of the same loop with time limits treated as terminal, as PureJaxRL does;
  - JAX, time to solve: the same update compiled as a chunk of 4 updates (8,192 steps,
    payoff's eval_every), evaluated between chunks; compile seconds + training seconds
    until the solve;
  - payoff: training steps/s of the recipe with evaluation off (300k steps), split into
    rollout collection and update time, and time to solve (the recipe as shipped);
  - payoff parts: its batched vector env alone with random actions (env-only steps/s);
  - LunarLander-v3: payoff's `lunarlander-ppo` training steps/s (two rollouts, evaluation
    off) against Gymnasium's SyncVectorEnv of 16 stepped alone with random actions.

Steps/s are given per CPU second of the pinned process (time.process_time: the seconds it
ran, so they hold when other work shares the core) and per wall second.

Solved = the deterministic policy (argmax) averages >= 475 over 20 episodes of Gymnasium's
CartPole-v1, judged by the same function (payoff.rollout.vector.evaluate_batched) for both,
evaluation time excluded on both sides: payoff's recipe criterion.

    python benchmarks/ppo_vs_jax.py              # seeds 0-4, ~4 minutes on a quiet machine
    python benchmarks/ppo_vs_jax.py --seeds 3 --lunar-seeds 0
    python benchmarks/ppo_vs_jax.py --no-write   # print only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import markdown_table, worker_result, write_section  # noqa: E402

RECIPE = "cartpole-ppo"
LUNAR_RECIPE = "lunarlander-ppo"
LUNAR_ROLLOUTS = 2
LUNAR_ENV, LUNAR_ENVS, LUNAR_STEPS = "LunarLander-v3", 16, 1024  # the recipe's envs x steps
TARGET = 475.0
EVAL_EPISODES = 20
EVAL_EVERY = 8192
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def pin_one_thread(cpu: int) -> None:
    """One CPU for this process (as `taskset -c CPU`) and one thread for torch and XLA.

    XLA_FLAGS must be set before jax is first imported, so workers call this first.
    """
    os.environ["XLA_FLAGS"] = XLA_ONE_THREAD
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    import torch

    torch.set_num_threads(1)


def recipe_config(seed: int, overrides: list[str] | None = None) -> Any:
    """payoff's resolved cartpole-ppo config: the one source of both sides' hyperparameters."""
    from payoff import train

    _, config, _ = train.resolve(RECIPE, overrides or [], seed=seed)
    return config


def evaluate(act: Any, seed: int) -> float:
    """Mean return of `act` over EVAL_EPISODES fresh CartPole-v1 episodes (both sides' judge)."""
    from payoff.envs.make import EnvConfig
    from payoff.rollout.vector import evaluate_batched

    return evaluate_batched(EnvConfig("CartPole-v1"), act, EVAL_EPISODES, seed, "sync").mean_return


# ---- JAX: PPO written the PureJaxRL way -------------------------------------------------------
def make_jax_ppo(config: Any, bootstrap_truncations: bool = True) -> dict[str, Any]:
    """`init(key)`, `update(state)` (one rollout + its update) and `train(key, n)` in JAX.

    bootstrap_truncations=False treats time limits as terminal, as PureJaxRL's ppo.py does:
    the critic then runs on T + 1 observations per env instead of 2T.
    """
    from collections.abc import Sequence

    import flax.linen as nn
    import gymnax
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    env, env_params = gymnax.make("CartPole-v1")
    num_envs, num_steps = config.num_envs, config.num_steps
    batch = num_envs * num_steps
    num_minibatches = batch // config.minibatch_size
    gamma, lam = config.gamma, config.gae_lambda
    clip = config.clip.start
    activation = {"tanh": nn.tanh, "relu": nn.relu}[config.activation]

    class MLP(nn.Module):
        hidden: Sequence[int]
        out: int
        out_gain: float

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            for width in self.hidden:
                x = nn.Dense(
                    width,
                    kernel_init=nn.initializers.orthogonal(np.sqrt(2)),
                    bias_init=nn.initializers.zeros,
                )(x)
                x = activation(x)
            return nn.Dense(
                self.out,
                kernel_init=nn.initializers.orthogonal(self.out_gain),
                bias_init=nn.initializers.zeros,
            )(x)

    actor = MLP(tuple(config.hidden), env.num_actions, 0.01)
    critic = MLP(tuple(config.hidden), 1, 1.0)
    # Actor and critic under one optimizer: the gradient norm is clipped jointly, as in payoff.
    tx = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(config.learning_rate.start, eps=1e-5),
    )
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset_envs = jax.vmap(env.reset, in_axes=(0, None))

    def init(key: jax.Array) -> tuple[Any, ...]:
        key, k_actor, k_critic, k_reset = jax.random.split(key, 4)
        dummy = jnp.zeros((1, *env.observation_space(env_params).shape))
        params = {"actor": actor.init(k_actor, dummy), "critic": critic.init(k_critic, dummy)}
        obs, env_state = reset_envs(jax.random.split(k_reset, num_envs), env_params)
        return params, tx.init(params), env_state, obs, key

    def env_step(carry: tuple[Any, ...], _: None) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        params, env_state, obs, key = carry
        key, k_action, k_step = jax.random.split(key, 3)
        logits = actor.apply(params["actor"], obs)  # [N, A]
        action = jax.random.categorical(k_action, logits)
        logprob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], 1)[:, 0]
        next_obs, env_state, reward, terminated, truncated, info = step_envs(
            jax.random.split(k_step, num_envs), env_state, action, env_params
        )
        # final_observation is the observation before an autoreset: V of it bootstraps cuts.
        transition = (
            obs,
            action,
            logprob,
            reward,
            terminated,
            truncated,
            info["final_observation"],
        )
        return (params, env_state, next_obs, key), transition

    def loss_fn(params: Any, minibatch: tuple[jax.Array, ...]) -> jax.Array:
        obs, action, old_logprob, advantage, target = minibatch
        logprobs = jax.nn.log_softmax(actor.apply(params["actor"], obs))
        logprob = jnp.take_along_axis(logprobs, action[:, None], 1)[:, 0]
        advantage = (advantage - advantage.mean()) / (advantage.std(ddof=1) + 1e-8)
        ratio = jnp.exp(logprob - old_logprob)
        pg_loss = jnp.maximum(
            -advantage * ratio, -advantage * jnp.clip(ratio, 1 - clip, 1 + clip)
        ).mean()
        value = critic.apply(params["critic"], obs)[:, 0]
        v_loss = 0.5 * jnp.square(value - target).mean()
        entropy = -(jnp.exp(logprobs) * logprobs).sum(-1).mean()
        return pg_loss + config.vf_coef * v_loss - config.ent_coef * entropy

    def update(state: tuple[Any, ...], _: None = None) -> tuple[tuple[Any, ...], jax.Array]:
        params, opt_state, env_state, obs, key = state
        (params, env_state, obs, key), rollout = jax.lax.scan(
            env_step, (params, env_state, obs, key), None, num_steps
        )
        r_obs, action, logprob, reward, terminated, truncated, final_obs = rollout  # [T, N, ...]
        continues = 1.0 - (terminated | truncated)
        if bootstrap_truncations:
            # Critic on every observation and every final observation in one batch.
            both = jnp.concatenate([r_obs, final_obs]).reshape(2 * batch, -1)
            values = critic.apply(params["critic"], both)[:, 0].reshape(2, num_steps, num_envs)
            value, final_value = values[0], values[1]
            # delta_t = r_t + gamma V(s'_t) (1 - terminated_t) - V(s_t), s'_t the final
            # observation (= s_{t+1} unless the episode ended): payoff's bootstrap of cuts.
            deltas = reward + gamma * final_value * (1.0 - terminated) - value
        else:  # PureJaxRL: V(s_0..s_T), every end of episode terminal
            every = jnp.concatenate([r_obs, obs[None]]).reshape((num_steps + 1) * num_envs, -1)
            values = critic.apply(params["critic"], every)[:, 0].reshape(-1, num_envs)
            value = values[:-1]
            deltas = reward + gamma * values[1:] * continues - value

        def gae_step(
            last: jax.Array, xs: tuple[jax.Array, jax.Array]
        ) -> tuple[jax.Array, jax.Array]:
            delta, cont = xs
            last = delta + gamma * lam * cont * last
            return last, last

        _, advantages = jax.lax.scan(
            gae_step, jnp.zeros(num_envs), (deltas, continues), reverse=True
        )
        targets = advantages + value
        flat = tuple(
            x.reshape(batch, *x.shape[2:]) for x in (r_obs, action, logprob, advantages, targets)
        )
        key, k_perm = jax.random.split(key)
        order = jax.random.permutation(k_perm, batch)
        minibatches = tuple(
            x[order].reshape(num_minibatches, config.minibatch_size, *x.shape[1:]) for x in flat
        )

        def minibatch_step(
            carry: tuple[Any, Any], minibatch: tuple[jax.Array, ...]
        ) -> tuple[tuple[Any, Any], jax.Array]:
            params, opt_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, minibatch)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        def epoch(carry: tuple[Any, Any], _: None) -> tuple[tuple[Any, Any], jax.Array]:
            return jax.lax.scan(minibatch_step, carry, minibatches)

        (params, opt_state), losses = jax.lax.scan(epoch, (params, opt_state), None, config.epochs)
        return (params, opt_state, env_state, obs, key), losses.mean()

    def train(key: jax.Array, num_updates: int) -> tuple[Any, ...]:
        state, _ = jax.lax.scan(update, init(key), None, num_updates)
        return state

    def run_updates(state: tuple[Any, ...], count: int) -> tuple[Any, ...]:
        state, _ = jax.lax.scan(update, state, None, count)
        return state

    def act(params: Any) -> Any:
        """Deterministic NumPy policy from the actor's weights (for evaluation)."""
        layers = [
            (np.asarray(layer["kernel"]), np.asarray(layer["bias"]))
            for layer in params["actor"]["params"].values()
        ]

        def policy(obs: Any) -> np.ndarray:
            x = np.asarray(obs, dtype=np.float32)
            for i, (kernel, bias) in enumerate(layers):
                x = x @ kernel + bias
                if i < len(layers) - 1:
                    x = np.tanh(x)
            return x.argmax(-1)

        return policy

    return {"init": init, "train": train, "run_updates": run_updates, "act": act}


class Stopwatch:
    """Accumulates wall seconds and this process's CPU seconds over `with` blocks.

    CPU seconds of a process pinned to one CPU count only the time it ran, so they stay
    meaningful when other work shares the core; wall seconds are what a user waits.
    """

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu

    def wrap(self, obj: Any, name: str) -> None:
        """Time every call of obj.name."""
        inner = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self:
                return inner(*args, **kwargs)

        setattr(obj, name, timed)


def run_jax(seed: int) -> dict[str, Any]:
    """Whole-loop compile and throughput, then time to solve with a 4-update chunk."""
    import jax

    config = recipe_config(seed)
    ppo = make_jax_ppo(config)
    batch = config.num_envs * config.num_steps
    num_updates = config.total_steps // batch  # PureJaxRL's NUM_UPDATES
    key = jax.random.PRNGKey(seed)

    # Whole loop: trace + compile once (ahead of time), then run it.
    with Stopwatch() as compile_clock:
        train = jax.jit(ppo["train"], static_argnums=1).lower(key, num_updates).compile()
    with Stopwatch() as loop_clock:
        jax.block_until_ready(train(key))

    # Time to solve: chunks of updates between evaluations (evaluation off the clock).
    chunk = max(1, EVAL_EVERY // batch)
    with Stopwatch() as chunk_compile:
        init = jax.jit(ppo["init"]).lower(key).compile()
        state = init(key)
        run_chunk = jax.jit(ppo["run_updates"], static_argnums=1).lower(state, chunk).compile()
    training = Stopwatch()
    steps, solved = 0, False
    while steps < num_updates * batch and not solved:
        with training:
            state = jax.block_until_ready(run_chunk(state))
        steps += chunk * batch
        score = evaluate(ppo["act"](state[0]), seed + 10_000 + steps)
        solved = score >= TARGET
    loop_steps = num_updates * batch
    return {
        "compile_s": compile_clock.wall,
        "compile_cpu_s": compile_clock.cpu,
        "loop_steps": loop_steps,
        "sps": loop_steps / loop_clock.wall,
        "sps_cpu": loop_steps / loop_clock.cpu,
        "chunk_compile_s": chunk_compile.wall,
        "solved": solved,
        "seconds": chunk_compile.wall + training.wall,
        "seconds_cpu": chunk_compile.cpu + training.cpu,
        "steps": steps,
        "pure_sps": pure_jax_sps(config, key, num_updates),
        "jax": jax.__version__,
    }


def pure_jax_sps(config: Any, key: Any, num_updates: int) -> float:
    """Steps/s of the compiled whole loop with time limits treated as terminal (PureJaxRL)."""
    import jax

    ppo = make_jax_ppo(config, bootstrap_truncations=False)
    train = jax.jit(ppo["train"], static_argnums=1).lower(key, num_updates).compile()
    with Stopwatch() as clock:
        jax.block_until_ready(train(key))
    return num_updates * config.num_envs * config.num_steps / clock.cpu


# ---- payoff -----------------------------------------------------------------------------------
def run_payoff(seed: int) -> dict[str, Any]:
    """The recipe with evaluation off (throughput, split), then as shipped (time to solve)."""
    import numpy as np

    from payoff.accel.native import native_status
    from payoff.algos.ppo import PPO
    from payoff.rollout.vector import make_vector_env

    agent = PPO(config=recipe_config(seed, ["eval_every=0"]))
    agent.config.final_eval_episodes = 1
    training, collect, update = Stopwatch(), Stopwatch(), Stopwatch()
    training.wrap(agent, "iterate")  # what the loop's train_seconds counts
    collect.wrap(agent.runner, "collect")
    update.wrap(agent, "update")
    agent.learn()
    steps = agent.step

    solver = PPO(
        config=recipe_config(
            seed,
            [
                f"eval_every={EVAL_EVERY}",
                f"eval_episodes={EVAL_EPISODES}",
                f"stop_at_return={TARGET}",
            ],
        )
    )
    solver.config.final_eval_episodes = 1
    solving = Stopwatch()
    solving.wrap(solver, "iterate")
    solver.learn()

    # The batched vector env alone: random actions drawn ahead, 300k steps.
    config = agent.config
    envs = make_vector_env(config.env, config.num_envs, config.vectorization)
    envs.reset(seed=seed)
    rounds = config.total_steps // config.num_envs
    actions = np.random.default_rng(seed).integers(0, 2, size=(rounds, config.num_envs))
    with Stopwatch() as env_clock:
        for row in actions:
            envs.step(row)
    return {
        "path": native_status(),
        "sps": steps / training.wall,
        "sps_cpu": steps / training.cpu,
        "collect_sps": steps / collect.cpu,
        "update_sps": steps / update.cpu,
        "collect_share": collect.cpu / training.cpu,
        "update_share": update.cpu / training.cpu,
        "env_sps": rounds * config.num_envs / env_clock.cpu,
        "solved": solver.solved_at is not None,
        "seconds": solving.wall,
        "seconds_cpu": solving.cpu,
        "steps": solver.step,
    }


def run_lunar(seed: int) -> dict[str, Any]:
    """lunarlander-ppo's training steps/s (two rollouts, evaluation off), the same with the
    torch reference (accelerate=false), and the env alone: Gymnasium's SyncVectorEnv of 16
    LunarLander-v3 with random actions, timed before and after training (their mean)."""
    import gymnasium as gym
    import numpy as np

    from payoff import train
    from payoff.algos.ppo import PPO

    def env_alone() -> float:
        envs = gym.vector.SyncVectorEnv([lambda: gym.make(LUNAR_ENV) for _ in range(LUNAR_ENVS)])
        envs.reset(seed=seed)
        rounds = LUNAR_STEPS
        actions = np.random.default_rng(seed).integers(0, 4, size=(rounds, LUNAR_ENVS))
        with Stopwatch() as env_clock:
            for row in actions:
                envs.step(row)
        envs.close()
        return rounds * LUNAR_ENVS / env_clock.cpu

    def training(overrides: list[str]) -> dict[str, Any]:
        _, config, _ = train.resolve(LUNAR_RECIPE, ["eval_every=0", *overrides], seed=seed)
        config.total_steps = LUNAR_ROLLOUTS * config.num_envs * config.num_steps
        config.final_eval_episodes = 1
        agent = PPO(config=config)
        whole, collect, update = Stopwatch(), Stopwatch(), Stopwatch()
        whole.wrap(agent, "iterate")
        collect.wrap(agent.runner, "collect")
        update.wrap(agent, "update")
        agent.learn()
        return {
            "sps_cpu": agent.step / whole.cpu,
            "collect_sps": agent.step / collect.cpu,
            "update_sps": agent.step / update.cpu,
            "accelerated": agent.accelerator is not None,
        }

    env_before = env_alone()
    recipe = training([])
    torch_path = training(["accelerate=false"])
    env_after = env_alone()
    from payoff.accel.native import native_status

    return {
        **recipe,
        "path": native_status(),
        "torch_sps": torch_path["sps_cpu"],
        "torch_update_sps": torch_path["update_sps"],
        "env_sps": (env_before + env_after) / 2,
    }


def worker(spec: str) -> None:
    job = json.loads(spec)
    pin_one_thread(job["cpu"])
    runner = {"jax": run_jax, "payoff": run_payoff, "lunar": run_lunar}[job["lib"]]
    print(json.dumps(runner(job["seed"])))


# ---- the comparison ---------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--cpu", type=int, default=0, help="the CPU every trial is pinned to")
    parser.add_argument(
        "--lunar-seeds", type=int, default=3, help="LunarLander throughput seeds (0 skips it)"
    )
    parser.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md alone")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    load_before = os.getloadavg()
    results: dict[str, list[dict[str, Any]]] = {"payoff": [], "jax": []}
    for seed in range(args.seeds):
        for lib in ("payoff", "jax") if seed % 2 == 0 else ("jax", "payoff"):
            job = {"lib": lib, "seed": seed, "cpu": args.cpu}
            result = worker_result(__file__, job, f"{lib:>6} seed {seed}")
            extra = f"{result['sps_cpu']:,.0f} steps/s per CPU second" + (
                f", compile {result['compile_cpu_s']:.2f} CPU s" if lib == "jax" else ""
            )
            print(f"         {extra}", flush=True)
            results[lib].append(result)
    lunar = []
    for seed in range(args.lunar_seeds):
        job = {"lib": "lunar", "seed": seed, "cpu": args.cpu}
        out = subprocess.run(
            [sys.executable, __file__, "--worker", json.dumps(job)],
            capture_output=True,
            text=True,
            check=True,
        )
        lunar.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(
            f"lunarlander seed {seed}: payoff trains {lunar[-1]['sps_cpu']:,.0f} steps/s, "
            f"SyncVectorEnv alone {lunar[-1]['env_sps']:,.0f}",
            flush=True,
        )
    load_after = os.getloadavg()

    def med(lib: str, key: str) -> float:
        return median([r[key] for r in results[lib]])

    def per_seed(lib: str, key: str, fmt: str = "{:,.0f}") -> str:
        return ", ".join(fmt.format(r[key]) for r in results[lib])

    def solved(lib: str) -> str:
        return f"{sum(r['solved'] for r in results[lib])}/{len(results[lib])}"

    ratios = {
        "throughput": med("payoff", "sps") / med("jax", "sps"),
        "throughput_cpu": med("payoff", "sps_cpu") / med("jax", "sps_cpu"),
        "solve": med("payoff", "seconds") / med("jax", "seconds"),
        "solve_cpu": med("payoff", "seconds_cpu") / med("jax", "seconds_cpu"),
    }
    jax_name = f"JAX {results['jax'][0]['jax']} + gymnax, whole loop jitted"
    rows = []
    payoff_name = f"payoff, accelerate auto: {results['payoff'][0]['path']}"
    for lib, name in (("jax", jax_name), ("payoff", payoff_name)):
        rows.append(
            [
                name,
                f"{med(lib, 'sps'):,.0f}",
                f"{med(lib, 'sps_cpu'):,.0f}",
                per_seed(lib, "sps_cpu"),
                f"{med(lib, 'compile_s'):.2f} ({med(lib, 'compile_cpu_s'):.2f})"
                if lib == "jax"
                else "0",
                solved(lib),
                f"{med(lib, 'seconds'):.2f} ({med(lib, 'seconds_cpu'):.2f})",
                per_seed(lib, "seconds_cpu", "{:.2f}"),
            ]
        )
    rows.insert(
        1,
        [
            "JAX, time limits as terminal (PureJaxRL's ppo.py), whole loop jitted",
            "-",
            f"{med('jax', 'pure_sps'):,.0f}",
            per_seed("jax", "pure_sps"),
            "-",
            "-",
            "-",
            "-",
        ],
    )
    table = markdown_table(
        [
            "library",
            "train steps/s, wall",
            "train steps/s, CPU",
            "per seed (CPU)",
            "compile s, wall (CPU)",
            "solved",
            "s to solve incl. compile, wall (CPU)",
            "per seed (CPU s)",
        ],
        rows,
    )
    parts = markdown_table(
        ["payoff part", "steps/s per CPU second", "share of training CPU time"],
        [
            ["whole training loop (evaluation off)", f"{med('payoff', 'sps_cpu'):,.0f}", "1"],
            [
                "rollout collection (actor + env + critic pass)",
                f"{med('payoff', 'collect_sps'):,.0f}",
                f"{med('payoff', 'collect_share'):.2f}",
            ],
            [
                "update (GAE + 4 minibatch steps)",
                f"{med('payoff', 'update_sps'):,.0f}",
                f"{med('payoff', 'update_share'):.2f}",
            ],
            ["vector env alone, random actions", f"{med('payoff', 'env_sps'):,.0f}", "-"],
        ],
    )
    summary = (
        f"**payoff / JAX training throughput = {ratios['throughput_cpu']:.2f}x per CPU second, "
        f"{ratios['throughput']:.2f}x wall** ({med('payoff', 'sps_cpu'):,.0f} / "
        f"{med('jax', 'sps_cpu'):,.0f} steps/s; goal >= 1, first milestone 450k steps/s). "
        f"**payoff / JAX time to solve (JAX's compile included) = {ratios['solve_cpu']:.3f} "
        f"per CPU second, {ratios['solve']:.3f} wall** (1/{1 / ratios['solve_cpu']:.0f} and "
        f"1/{1 / ratios['solve']:.0f}; goal <= 1/20)."
    )
    print(summary)
    first = results["jax"][0]
    body = (
        f"Recipe `{RECIPE}` on both sides: 64 envs x 32 steps, one epoch of 4 minibatches, "
        f"lr 1e-2, tanh 64-64 actor and critic, truncations bootstrapped from V(final "
        f"observation). JAX side: our PPO written the PureJaxRL way (gymnax CartPole-v1, flax, "
        f"optax; rollout, GAE and update of all {first['loop_steps'] // 2048} iterations in "
        f"one `jax.jit`). Each trial runs in a fresh process pinned to one CPU "
        f"(sched_setaffinity, as `taskset`), torch with 1 thread, "
        f'XLA_FLAGS="{XLA_ONE_THREAD}"; payoff and JAX alternate seed by seed (seeds '
        f"0-{args.seeds - 1}; medians). Train steps/s: JAX's compiled loop over "
        f"{first['loop_steps']:,} steps after its compile; payoff's recipe with evaluation "
        f"off (300k steps). Time to solve: the deterministic policy averages >= {TARGET:.0f} "
        f"over {EVAL_EPISODES} episodes of Gymnasium's CartPole-v1, judged every {EVAL_EVERY} "
        f"steps by the same function for both, evaluation off the clock; JAX's time includes "
        f"compiling its 4-update chunk (median {med('jax', 'chunk_compile_s'):.2f} s wall). "
        f"CPU columns count the seconds the pinned process ran (all its threads), so they "
        f"hold when other work shares the core; wall columns are what a user waits. Machine "
        f"load average (1 min) {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the "
        f"end, on 2 cores shared with other work.\n\n{table}\n\nWhere payoff's time goes "
        f"(medians over the same runs):\n\n{parts}\n\n- {summary}"
    )
    if lunar:

        def lunar_median(key: str) -> float:
            return median([r[key] for r in lunar])

        def lunar_row(label: str, key: str) -> list[str]:
            per_seed = ", ".join(f"{r[key]:,.0f}" for r in lunar)
            return [label, f"{lunar_median(key):,.0f}", per_seed]

        lunar_ratio = lunar_median("env_sps") / lunar_median("sps_cpu")
        torch_ratio = lunar_median("env_sps") / lunar_median("torch_sps")
        lunar_table = markdown_table(
            ["LunarLander-v3, 16 envs", "steps/s per CPU second (median)", "per seed"],
            [
                lunar_row("Gymnasium SyncVectorEnv alone, random actions", "env_sps"),
                lunar_row(f"payoff `{LUNAR_RECIPE}` training (evaluation off)", "sps_cpu"),
                lunar_row("... its rollout collection alone", "collect_sps"),
                lunar_row("... its update alone (4 epochs x 256 minibatches of 64)", "update_sps"),
                lunar_row(
                    "the same training on the torch reference (accelerate=false)", "torch_sps"
                ),
                lunar_row("... its update alone", "torch_update_sps"),
            ],
        )
        seed_ratios = [r["env_sps"] / r["sps_cpu"] for r in lunar]
        lunar_summary = (
            f"**LunarLander: env alone / payoff training = {lunar_ratio:.2f}x** (goal <= 1.5; "
            f"{torch_ratio:.2f}x on the torch path); seed by seed (each seed's env alone over "
            f"its training): {', '.join(f'{r:.2f}' for r in seed_ratios)}, median "
            f"{median(seed_ratios):.2f}."
        )
        print(lunar_summary)
        body += (
            f"\n\nLunarLander-v3 with `{LUNAR_RECIPE}` (16 envs x 1024 steps, 4 epochs of "
            f"minibatch 64, entropy 0.01; accelerate auto: each sampling step and "
            f"each minibatch step in one call of {lunar[0]['path']}): payoff's training over "
            f"{LUNAR_ROLLOUTS} rollouts against the env alone (timed before and after the "
            f"training runs, their mean), each seed in a fresh process on the same pinned "
            f"CPU (seeds 0-{args.lunar_seeds - 1}).\n\n{lunar_table}\n\n- {lunar_summary}"
        )
    if not args.no_write:
        path = write_section("ppo_vs_jax", "CartPole-v1 PPO: payoff vs a jitted JAX loop", body)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
