"""The deep-RL GPU path: payoff and Stable-Baselines3 training throughput on the CPU and on a
CUDA GPU, same machine, same run.

Each trial trains a fixed number of environment steps with evaluation off, in its own
subprocess, with one torch CPU thread:

    PPO on CartPole-v1       payoff's cartpole-ppo recipe; SB3 with rl-zoo's CartPole settings
    SAC on Pendulum-v1       payoff's pendulum-sac recipe; SB3 with rl-zoo's Pendulum settings

and reports environment steps per second of training on each device, and cuda / cpu. The
networks here are small MLPs (64-64 and 256-256): a GPU pays a kernel launch per layer per
step, so the table says whether `device=cuda` is worth it for such agents (the
language-model trainers are measured on the GPU by `grpo_vs_trl.py --device cuda`).

    python benchmarks/gpu_path.py            # needs a CUDA GPU; SB3 rows where it is installed
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cartpole_vs_sb3 import SB3_PPO, sb3_ppo  # noqa: E402
from benchmarks.common import markdown_table, write_section  # noqa: E402
from benchmarks.continuous_vs_sb3 import SB3_SETTINGS  # noqa: E402

# (algorithm, recipe, env id, payoff steps, SB3 steps)
TRIALS = [
    ("ppo", "cartpole-ppo", "CartPole-v1", 100_000, 20_000),
    ("sac", "pendulum-sac", "Pendulum-v1", 3_000, 1_000),
]


def run_payoff(recipe: str, steps: int, device: str) -> float:
    from payoff import train

    overrides = [f"total_steps={steps}", "eval_every=0", "final_eval_episodes=1", "threads=1"]
    cls, config, _ = train.resolve(recipe, [*overrides, f"device={device}"], seed=0)
    agent = cls(config=config)
    started = time.perf_counter()
    agent.learn()
    return steps / (time.perf_counter() - started)


def run_sb3(algo: str, env_id: str, steps: int, device: str) -> float:
    if algo == "ppo":
        p = SB3_PPO
        model = sb3_ppo(env_id, p, 0, device, learning_rate=p["learning_rate"])
    else:
        from stable_baselines3 import SAC

        settings = {
            k: v for k, v in SB3_SETTINGS[("sac", "pendulum")].items() if k != "n_timesteps"
        }
        model = SAC("MlpPolicy", env_id, seed=0, device=device, **settings)
    started = time.perf_counter()
    model.learn(steps)
    return steps / (time.perf_counter() - started)


def worker(spec: str) -> None:
    import torch

    torch.set_num_threads(1)
    lib, algo, device = spec.split(":")
    recipe, env_id, ours, theirs = next(t[1:] for t in TRIALS if t[0] == algo)
    if lib == "payoff":
        rate = run_payoff(recipe, ours, device)
    else:
        rate = run_sb3(algo, env_id, theirs, device)
    print("RESULT " + json.dumps({"steps_per_s": rate}), flush=True)


def trial(lib: str, algo: str, device: str) -> float | None:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", f"{lib}:{algo}:{device}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(f"{lib} {algo} on {device} failed:\n{out.stderr[-3000:]}", file=sys.stderr)
        return None
    rate = json.loads(line[7:])["steps_per_s"]
    print(f"{lib:7s} {algo} on {device:4s}: {rate:,.0f} env steps/s", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_path.py needs a CUDA GPU: torch sees none on this machine")
    try:
        import stable_baselines3  # noqa: F401

        libs = ["payoff", "sb3"]
    except ImportError:
        libs = ["payoff"]
        print("stable-baselines3 is not installed: payoff rows only", file=sys.stderr)
    rows: list[list[Any]] = []
    for algo, recipe, env_id, ours, theirs in TRIALS:
        for lib in libs:
            cpu, cuda = (trial(lib, algo, d) for d in ("cpu", "cuda"))
            steps = ours if lib == "payoff" else theirs
            ratio = f"{cuda / cpu:.2f}x" if cpu and cuda else "-"
            setting = recipe if lib == "payoff" else "rl-zoo"
            rows.append([f"{lib} {algo.upper()}", env_id, setting, steps, cpu, cuda, ratio])
    table = markdown_table(
        ["agent", "env", "settings", "steps", "CPU steps/s", "CUDA steps/s", "CUDA / CPU"], rows
    )
    print(table)
    body = (
        f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}. Each row trains the "
        "given number of environment steps with evaluation off, in its own process, one torch "
        "CPU thread, on the CPU and then with `device=cuda` (payoff) or `device='cuda'` (SB3). "
        "Steps per second of training.\n\n" + table + "\n\n"
    )
    ratios = [r[4] and r[5] and r[5] / r[4] for r in rows]
    slower = [r[0] for r, x in zip(rows, ratios, strict=True) if x and x < 1]
    if slower:
        body += (
            f"On the GPU {', '.join(slower)} train slower than on one CPU core: these networks "
            "are small MLPs, and on a GPU every layer of every step is a kernel launch and a "
            "host-device copy. For classic control keep `device=cpu`; note that `device=auto` "
            "picks the GPU where there is one. "
        )
    body += "The language-model trainers on the GPU: `grpo_vs_trl.py --device cuda`."
    write_section("gpu_path", "The deep-RL GPU path: CPU vs CUDA", body)


if __name__ == "__main__":
    main()
