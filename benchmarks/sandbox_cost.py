"""What OS isolation costs per completion: the code verifier with and without it.

Three ways to run one completion of the python task against its tests, same machine, same
run, interleaved:

  - bare:            `python -I -c "solution; tests"` and trust exit status 0 (what a
                     first verifier does; the previous payoff sandbox was this plus an
                     audit hook, ~28 ms per completion here on 2026-11-25);
  - unsafe-process:  payoff's verdict protocol (values out, expected values kept outside)
                     in a plain child process, no namespaces;
  - bwrap:           the same protocol under bubblewrap (namespaces, seccomp, rlimits).

Reported: median milliseconds for one completion, and seconds for a GRPO-sized batch of
64 through `CodeVerifier` (4 worker threads, as in training). Goal: isolation adds under
50 ms per completion.

    python benchmarks/sandbox_cost.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import write_section  # noqa: E402
from payoff.envs.tasks.python_functions import PythonFunctions  # noqa: E402
from payoff.rewards.code import CodeVerifier, program_from  # noqa: E402
from payoff.sandbox import run_tests  # noqa: E402


def bare(program: str, tests: str) -> bool:
    completed = subprocess.run(
        [sys.executable, "-I", "-c", program + "\n" + tests], capture_output=True, timeout=10
    )
    return completed.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    task = PythonFunctions()
    rng = np.random.default_rng(0)
    rows = [task._problem(rng, "train") for _ in range(64)]
    programs = [program_from(r["prompt"], r["answer"]) for r in rows]
    tests = [r["tests"] for r in rows]
    ways = {
        "bare": lambda i: bare(programs[i], tests[i]),
        "unsafe-process": lambda i: (
            run_tests(programs[i], tests[i], sandbox="unsafe-process").passed
        ),
        "bwrap": lambda i: run_tests(programs[i], tests[i], sandbox="bwrap").passed,
    }
    for way in ways.values():  # warm-up (the bwrap probe, page cache)
        assert way(0)
    single: dict[str, list[float]] = {name: [] for name in ways}
    for repeat in range(args.repeats):
        for name, way in ways.items():
            started = time.perf_counter()
            assert way(repeat % len(rows))
            single[name].append(time.perf_counter() - started)

    batch: dict[str, list[float]] = {name: [] for name in ("unsafe-process", "bwrap")}
    for _ in range(3):
        for name in batch:
            verifier = CodeVerifier(sandbox=name, workers=4)
            started = time.perf_counter()
            scores = verifier([r["prompt"] for r in rows], [r["answer"] for r in rows], tests=tests)
            batch[name].append(time.perf_counter() - started)
            assert scores == [1.0] * len(rows)

    ms = {name: 1000 * statistics.median(times) for name, times in single.items()}
    batch_s = {name: statistics.median(times) for name, times in batch.items()}
    added = ms["bwrap"] - ms["unsafe-process"]
    lines = [
        "| way | one completion (median ms) | batch of 64, 4 workers (median s) |",
        "|---|---|---|",
        f"| bare `python -I`, exit status trusted | {ms['bare']:.1f} | |",
        f"| payoff verdict, unsafe-process | {ms['unsafe-process']:.1f} | {batch_s['unsafe-process']:.2f} |",
        f"| payoff verdict, bwrap (default) | {ms['bwrap']:.1f} | {batch_s['bwrap']:.2f} |",
        "",
        f"Isolation adds **{added:.1f} ms** per completion over the same protocol without "
        f"namespaces, and {ms['bwrap'] - ms['bare']:.1f} ms over a bare child process "
        f"(goal: under 50 ms). {args.repeats} interleaved repeats; the batch is 64 python-task "
        "completions through `CodeVerifier`, three times each.",
    ]
    body = "\n".join(lines)
    print(body)
    write_section("sandbox", "Code sandbox: cost of OS isolation per completion", body)


if __name__ == "__main__":
    main()
