"""Imitation learning: payoff's BC and DAgger vs the `imitation` library, and KartTrack throughput.

    python benchmarks/imitation_vs_imitation_lib.py [--quick]

Same task for both: CartPole-v1, the same scripted expert (push toward where the pole
falls), the same label budget, a 32-32 MLP, Adam 1e-3, minibatches of 256. The `imitation`
library pins its own gymnasium / stable-baselines3, so it lives in its own virtualenv
(IMITATION_PYTHON, default /tmp/imitation-venv/bin/python; create it with
`python3.11 -m venv /tmp/imitation-venv && /tmp/imitation-venv/bin/pip install imitation torch==2.13.0`)
and this script runs it as a subprocess: this file again, with --reference-side.
Timed: training only (data collection + fitting), not imports or evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
IMITATION_PYTHON = os.environ.get("IMITATION_PYTHON", "/tmp/imitation-venv/bin/python")
BC_LABELS, BC_EPOCHS = 2000, 40
DAGGER_LABELS, DAGGER_ROUNDS, DAGGER_EPOCHS = 2000, 4, 10
BATCH, HIDDEN = 256, [32, 32]


def scripted_cartpole(obs: np.ndarray) -> np.ndarray:
    """The shared expert (a copy of payoff.rollout.experts.CartPoleExpert, so the reference
    side needs no payoff import)."""
    obs = np.asarray(obs, dtype=np.float64).reshape(-1, 4)
    push = obs[:, 2] + 0.3 * obs[:, 3] + 0.02 * obs[:, 0] + 0.1 * obs[:, 1]
    return (push > 0).astype(np.int64)


# ---- the reference library, run under its own interpreter ------------------------------------
def reference_side(quick: bool) -> None:
    import gymnasium as gym
    import torch as th
    from imitation.algorithms import bc
    from imitation.algorithms.dagger import SimpleDAggerTrainer
    from imitation.data import rollout
    from imitation.data.types import Transitions
    from imitation.util.util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.policies import BasePolicy

    th.set_num_threads(1)

    class Scripted(BasePolicy):
        def _predict(self, observation: th.Tensor, deterministic: bool = False) -> th.Tensor:
            return th.as_tensor(scripted_cartpole(observation.cpu().numpy()))

    rng = np.random.default_rng(0)
    from imitation.data.wrappers import RolloutInfoWrapper

    venv = make_vec_env(
        "CartPole-v1", rng=rng, n_envs=1, post_wrappers=[lambda env, _: RolloutInfoWrapper(env)]
    )
    expert = Scripted(venv.observation_space, venv.action_space)
    epochs = BC_EPOCHS // 4 if quick else BC_EPOCHS
    out = {}

    started = time.perf_counter()
    trajectories = rollout.rollout(
        expert, venv, rollout.make_sample_until(min_timesteps=BC_LABELS), rng=rng
    )
    flat = rollout.flatten_trajectories(trajectories)
    transitions = Transitions(
        obs=flat.obs[:BC_LABELS],
        acts=flat.acts[:BC_LABELS],
        infos=flat.infos[:BC_LABELS],
        next_obs=flat.next_obs[:BC_LABELS],
        dones=flat.dones[:BC_LABELS],
    )
    trainer = bc.BC(
        observation_space=venv.observation_space,
        action_space=venv.action_space,
        demonstrations=transitions,
        rng=rng,
        batch_size=BATCH,
        optimizer_kwargs={"lr": 1e-3},
    )
    trainer.train(n_epochs=epochs, progress_bar=False, log_interval=10**9)
    seconds = time.perf_counter() - started
    score, _ = evaluate_policy(trainer.policy, venv, 10)
    out["bc"] = {"seconds": seconds, "labels": len(transitions), "return": float(score)}

    import tempfile

    started = time.perf_counter()
    bc_trainer = bc.BC(
        observation_space=venv.observation_space,
        action_space=venv.action_space,
        rng=rng,
        batch_size=BATCH,
        optimizer_kwargs={"lr": 1e-3},
    )
    with tempfile.TemporaryDirectory() as scratch:
        dagger = SimpleDAggerTrainer(
            venv=venv, scratch_dir=scratch, expert_policy=expert, bc_trainer=bc_trainer, rng=rng
        )
        dagger.train(
            total_timesteps=DAGGER_LABELS,
            rollout_round_min_episodes=1,
            rollout_round_min_timesteps=DAGGER_LABELS // DAGGER_ROUNDS,
            bc_train_kwargs={
                "n_epochs": DAGGER_EPOCHS // (2 if quick else 1),
                "progress_bar": False,
                "log_interval": 10**9,
            },
        )
        labels = sum(len(t.acts) for t in dagger._all_demos)
        rounds = dagger.round_num
    seconds = time.perf_counter() - started
    score, _ = evaluate_policy(bc_trainer.policy, venv, 10)
    out["dagger"] = {"seconds": seconds, "labels": labels, "rounds": rounds, "return": float(score)}
    _ = gym
    print("RESULT " + json.dumps(out))


# ---- payoff's side ---------------------------------------------------------------------------
def payoff_side(quick: bool) -> dict[str, dict[str, float]]:
    from payoff.algos.bc import BC
    from payoff.algos.dagger import DAgger

    common = {"env": "CartPole-v1", "expert": "cartpole", "hidden": HIDDEN, "batch_size": BATCH}
    out = {}
    bc = BC(
        **common,
        label_budget=BC_LABELS,
        epochs=BC_EPOCHS // 4 if quick else BC_EPOCHS,
        eval_every=0,
        final_eval_episodes=10,
    )
    started = time.perf_counter()
    bc.gather()
    for _ in range(bc.config.epochs):
        bc.fit_epoch()
    out["bc"] = {
        "seconds": time.perf_counter() - started,
        "labels": bc.labels,
        "return": bc.evaluate(10).mean_return,
    }
    dagger = DAgger(
        **common,
        label_budget=DAGGER_LABELS,
        rounds=DAGGER_ROUNDS,
        epochs_per_round=DAGGER_EPOCHS // (2 if quick else 1),
        num_envs=1,
        final_eval_episodes=10,
    )
    from payoff.rollout.imitation import make_envs

    dagger._envs = make_envs(dagger.config.env, dagger.config.num_envs)
    started = time.perf_counter()
    while dagger.round < DAGGER_ROUNDS:
        dagger.iterate()
    out["dagger"] = {
        "seconds": time.perf_counter() - started,
        "labels": dagger.labels,
        "rounds": dagger.round,
        "return": dagger.evaluate(10).mean_return,
    }
    return out


def kart_throughput(quick: bool) -> list[list[object]]:
    """Env steps per second: the Gymnasium env (one kart) and the NumPy batch."""
    from payoff.envs.kart import KartBatch
    from payoff.envs.make import make_env
    from payoff.rollout.experts import KartExpert

    rows: list[list[object]] = []
    env = make_env("payoff/KartTrack-v0")
    obs, _ = env.reset(seed=0)
    driver = KartExpert()  # drives whole laps, so resets (a new track each) are included
    steps = 2_000 if quick else 20_000
    started = time.perf_counter()
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(driver.act(obs[None])[0])
        if terminated or truncated:
            obs, _ = env.reset()
    rows.append(
        [
            "KartTrackEnv (gymnasium.make, 1 kart, scripted driver, resets included)",
            1,
            round(steps / (time.perf_counter() - started)),
        ]
    )
    for num in (64, 1024, 4096):
        batch = KartBatch(num)
        rng = np.random.default_rng(0)
        batch.reset(rng)
        actions = np.zeros((num, 1))
        n = max(20, (200 if quick else 2_000) * 64 // num)
        started = time.perf_counter()
        for _ in range(n):
            batch.step(actions, rng)  # no resets: the timing is the step itself
        rows.append(
            [
                f"KartBatch ({num} karts, one array step)",
                num,
                round(n * num / (time.perf_counter() - started)),
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs and steps (a smoke run)")
    parser.add_argument("--reference-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_side:
        reference_side(args.quick)
        return
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks.common import markdown_table, write_section

    torch.set_num_threads(1)
    throughput = kart_throughput(args.quick)
    for name, _num, sps in throughput:
        print(f"{name}: {sps:,} steps/s")
    ours = payoff_side(args.quick)
    print("payoff:", json.dumps(ours))
    reference = None
    if Path(IMITATION_PYTHON).exists():
        cmd = [IMITATION_PYTHON, __file__, "--reference-side"] + (["--quick"] if args.quick else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd="/tmp")
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(proc.stderr[-3000:])
            raise SystemExit("the imitation-library side failed; see its output above")
        reference = json.loads(lines[-1][len("RESULT ") :])
        print("imitation:", json.dumps(reference))
        version = subprocess.run(
            [
                IMITATION_PYTHON,
                "-c",
                "import imitation, stable_baselines3 as s, gymnasium as g; print(imitation.__version__, s.__version__, g.__version__)",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
    else:
        print(f"no imitation-library interpreter at {IMITATION_PYTHON}; payoff side only")
        version = []
    rows = []
    for algo in ("bc", "dagger"):
        mine = ours[algo]
        theirs = reference[algo] if reference else None
        ratio = theirs["seconds"] / mine["seconds"] if theirs else float("nan")
        rows.append(
            [
                algo.upper() if algo == "bc" else "DAgger",
                f"{mine['seconds']:.2f} s, {mine['labels']} labels, return {mine['return']:.0f}",
                f"{theirs['seconds']:.2f} s, {theirs['labels']} labels, return {theirs['return']:.0f}"
                if theirs
                else "n/a",
                f"{ratio:.1f}x" if theirs else "n/a",
            ]
        )
        print(f"{algo}: imitation / payoff wall time = {ratio:.2f}")
    load = os.getloadavg()[0]
    body = (
        f"Load average when the run ended: {load:.1f} on {os.cpu_count()} cores (other jobs share "
        "the machine; compare ratios, not seconds).\n\n"
        "KartTrack-v0 throughput (the batch rows: fixed steering, stepped without resets):\n\n"
        + markdown_table(["env", "karts", "steps/s"], throughput)
        + "\n\nBC and DAgger on CartPole-v1 with the same scripted expert, label budget, 32-32 MLP, "
        f"Adam 1e-3 and minibatch {BATCH}. BC: {BC_LABELS} labels, {BC_EPOCHS // 4 if args.quick else BC_EPOCHS} epochs. "
        f"DAgger: {DAGGER_LABELS} labels in {DAGGER_ROUNDS} rounds (payoff: exactly "
        f"{DAGGER_LABELS // DAGGER_ROUNDS} per round, expert drives round 1; imitation: whole episodes "
        f"until >= {DAGGER_LABELS // DAGGER_ROUNDS} steps per round, its default beta schedule), "
        f"{DAGGER_EPOCHS // (2 if args.quick else 1)} epochs per round (imitation: per round on all data; "
        "payoff: on the aggregated data). Wall time of data collection + training; return = mean "
        "of 10 deterministic episodes (500 is the maximum). Ratio = imitation time / payoff time.\n\n"
        + markdown_table(
            [
                "method",
                "payoff",
                "imitation"
                + (
                    f" {version[0]} (SB3 {version[1]}, gymnasium {version[2]})"
                    if len(version) == 3
                    else ""
                ),
                "speed-up",
            ],
            rows,
        )
    )
    write_section(
        "imitation", "Imitation learning: BC / DAgger vs imitation, KartTrack throughput", body
    )


if __name__ == "__main__":
    main()
