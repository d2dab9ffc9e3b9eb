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


# ---- weight copies of asynchronous generation ------------------------------------------------

ASYNC_GRPO = """
import sys
from payoff.algos.grpo import ALGORITHM as GRPO
from payoff.models.lm import ModelConfig, load_lm, save_lm

model, tokenizer = load_lm(ModelConfig(), seed=0)
path = save_lm(model, tokenizer, sys.argv[1])
GRPO(
    model={"path": str(path)},
    rewards=[{"name": "math"}],
    steps=100_000,
    prompts_per_step=4,
    group_size=4,
    max_new_tokens=4,
    warmup_steps=0,
    eval_every=0,
    task={"eval_size": 8},
    threads=1,
    async_generation=True,
).learn()
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _maps_weights(pid: int) -> bool:
    try:
        return "weights-ring" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # imports torch and transformers twice, builds the tiny model: ~30-100 s
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes through /proc")
def test_a_sigkilled_async_grpo_run_leaves_no_weight_copies(tmp_path):
    pytest.importorskip("transformers", reason="the llm extra is not installed")
    shm = Path("/dev/shm")
    before = set(shm.glob("payoff-weights-*")) if shm.is_dir() else set()
    process = subprocess.Popen(
        [sys.executable, "-c", ASYNC_GRPO, str(tmp_path / "model")],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 300
        sampler = None
        while sampler is None:  # until the sampling process has mapped a weights version
            assert process.poll() is None, process.stderr.read()
            assert time.time() < deadline, "the weights were never shared"
            sampler = next((c for c in _children(process.pid) if _maps_weights(c)), None)
            time.sleep(0.05)
        assert _maps_weights(process.pid)  # the learner maps the same memory
    finally:
        process.kill()
        process.wait()
    leftovers = (set(shm.glob("payoff-weights-*")) if shm.is_dir() else set()) - before
    assert not leftovers, f"left in /dev/shm: {sorted(map(str, leftovers))}"
    # The sampling process notices its parent is gone and exits: then nothing maps the
    # weights any more and the kernel frees them.
    deadline = time.time() + 30
    while _alive(sampler) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(sampler)


@pytest.mark.slow  # starts a sampling process (torch and transformers imported again)
def test_weights_of_mixed_dtypes_travel_in_the_message_not_in_a_file():
    """Weights of more than one dtype skip the shared ring: nothing is written anywhere,
    and the child still samples with the learner's weights (it starts from other ones)."""
    pytest.importorskip("transformers", reason="the llm extra is not installed")
    import torch

    from payoff.models.lm import ModelConfig, load_lm
    from payoff.rollout.async_generation import ProcessSampler
    from payoff.rollout.generation import LocalSampler, SamplingConfig

    prompts, sampling = ["1+2=", "30+4=", "5+67="], SamplingConfig(max_new_tokens=6, stop=["="])
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    sampler = ProcessSampler(ModelConfig(), model, tokenizer.pad_token_id, seed=1, threads=1)
    first = next(model.parameters())
    try:
        first.data = first.data.double()  # one float64 tensor among float32 ones
        remote = sampler.generate(prompts, sampling, torch.Generator().manual_seed(3))
        assert sampler.start().rings == [] and sampler.counters["weight_pushes"] == 1
    finally:
        sampler.close()
    first.data = first.data.float()  # the same values (they came from float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here = LocalSampler(model, tokenizer).generate(
            prompts, sampling, torch.Generator().manual_seed(3)
        )
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(remote.completion_ids, here.completion_ids)
    assert torch.equal(remote.logprobs, here.logprobs)
