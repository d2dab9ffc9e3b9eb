"""Operations on Ray runs and async generation: a stop signal keeps the checkpoint, a killed
run leaves no weight copies in /dev/shm."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from payoff.track.run import Run, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PAYOFF_PROGRESS": "0"}

# cartpole-ppo-ray (2 workers, a private 2-CPU Ray) cut down to ~40 updates of 256 env steps.
RAY_RUN = [
    "cartpole-ppo-ray",
    "total_steps=10240",
    "num_envs=4",
    "num_steps=64",
    "minibatch_size=128",
    "epochs=2",
    "eval_every=0",
    "final_eval_episodes=2",
    "ray.num_cpus=2",
    "--seed",
    "3",
    "--no-media",
]


def _payoff(*argv: str, new_session: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "payoff.cli", *argv],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def _only_run(out: Path) -> Path:
    (path,) = [p for p in out.iterdir() if p.is_dir()]
    return path


def _learning(run: Path) -> list[dict]:
    """The metrics that must match exactly: all but wall-clock and timings."""
    return [
        {k: v for k, v in row.items() if k != "time" and not k.startswith("perf/")}
        for row in read_jsonl(run / "metrics.jsonl")
    ]


def _wait_for_metrics(out: Path, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = list(out.glob("*/metrics.jsonl"))
        if runs and read_jsonl(runs[0]):
            return
        if process.poll() is not None:
            raise AssertionError(f"the run ended before its first record: {process.stderr.read()}")
        time.sleep(0.02)
    raise AssertionError("no record within the timeout")


@pytest.fixture(scope="module")
def uninterrupted_ray_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ray-straight")
    process = _payoff("train", *RAY_RUN, "--out", str(out))
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    return _only_run(out)


@pytest.mark.slow
@pytest.mark.parametrize("to_group", [False, True], ids=["to-the-process", "to-its-group"])
def test_sigterm_to_a_ray_run_checkpoints_exits_143_and_resumes_exactly(
    tmp_path, uninterrupted_ray_run, to_group
):
    pytest.importorskip("ray")
    out = tmp_path / "interrupted"
    # Its own session, as under `timeout` or a batch job: a group signal reaches Ray's
    # own processes (GCS, raylet) too, not only payoff's.
    process = _payoff("train", *RAY_RUN, "--out", str(out), new_session=True)
    _wait_for_metrics(out, process)
    sent = time.monotonic()
    if to_group:
        os.killpg(process.pid, signal.SIGTERM)
    else:
        process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    seconds = time.monotonic() - sent
    run = _only_run(out)
    assert process.returncode == 143, stderr
    assert "SIGTERM received" not in stderr  # Ray's C++ crash handler did not take the signal
    assert f"payoff train --resume {run}" in stdout
    state, _ = Run.open(run).load_checkpoint("ppo")
    assert 0 < state["state"]["loop"]["step"] < 10240
    assert not (run / "summary.json").exists()
    assert seconds < 60, f"{seconds:.1f} s from SIGTERM to exit"

    resumed = _payoff("train", "--resume", str(run), "--no-media")
    _, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    assert _learning(run) == _learning(uninterrupted_ray_run)


@pytest.mark.slow
def test_ray_start_leaves_sigterm_to_the_training_loop(tmp_path):
    """Ray's init takes SIGTERM for itself (exit status 15 at once); payoff's connect puts
    the loop's handler back, so the signal only asks the loop to stop."""
    pytest.importorskip("ray")
    script = textwrap.dedent(
        """
        import json, os, signal
        from payoff.rollout.ray_pool import RayConfig, connect
        from payoff.track.interrupt import GracefulInterrupt

        with GracefulInterrupt() as interrupt:
            ray = connect(RayConfig(num_cpus=1))
            os.kill(os.getpid(), signal.SIGTERM)
            asked = interrupt.requested
        ray.shutdown()
        print(json.dumps({"asked": asked, "handler": str(signal.getsignal(signal.SIGTERM))}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "asked": True,
        "handler": str(signal.SIG_DFL),  # the handler from before the loop, put back
    }
