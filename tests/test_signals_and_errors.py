"""SIGTERM and SIGHUP stop a run like Ctrl-C; bad CLI input and bad numbers give one line."""

import dataclasses
import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from payoff.algos import available_algorithms, get_algorithm
from payoff.cli import main
from payoff.core.config import check_ranges, from_dict, in_range
from payoff.core.errors import ConfigError
from payoff.track.interrupt import GracefulInterrupt, exit_status
from payoff.track.run import Run, read_jsonl

SHORT = [
    "total_episodes=600",
    "eval_every=200",
    "eval_episodes=50",
    "final_eval_episodes=50",
    "checkpoint_every=200",
]
LONG = [
    "total_episodes=6000",
    "eval_every=1000",
    "eval_episodes=50",
    "final_eval_episodes=100",
    "log_every=50",
]
ENV = {**os.environ, "PAYOFF_PROGRESS": "0"}


def only_run(out: Path) -> Path:
    (path,) = [p for p in out.iterdir() if p.is_dir()]
    return path


def comparable(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time"} for r in read_jsonl(path / "metrics.jsonl")]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished")
    assert (
        main(["train", "frozenlake-q", *SHORT, "--seed", "1", "--out", str(out), "--no-media"]) == 0
    )
    return only_run(out)


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


# ---- signals ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight")
    argv = ["train", "frozenlake-q", *LONG, "checkpoint_every=1000", "--seed", "7", "--no-media"]
    assert main([*argv, "--out", str(out)]) == 0
    return only_run(out)


@pytest.mark.parametrize(
    "signum, checkpoint_every",
    [
        (signal.SIGTERM, 1000),
        # stopped before its first periodic checkpoint: the interrupt writes the only one
        (signal.SIGHUP, 1_000_000),
    ],
    ids=["SIGTERM", "SIGHUP-before-first-checkpoint"],
)
def test_a_stop_signal_leaves_a_checkpoint_and_resume_matches_uninterrupted(
    tmp_path, uninterrupted, signum, checkpoint_every
):
    out = tmp_path / "interrupted"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "payoff.cli",
            "train",
            "frozenlake-q",
            *LONG,
            f"checkpoint_every={checkpoint_every}",
            "--seed",
            "7",
            "--no-media",
            "--out",
            str(out),
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until training is under way, then send the signal
        runs = list(out.glob("*"))
        if runs and len(read_jsonl(runs[0] / "metrics.jsonl")) >= 5:
            break
        time.sleep(0.02)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    run = only_run(out)
    assert process.returncode == 128 + signum, stderr
    assert f"payoff train --resume {run}" in stdout
    assert list(run.glob("checkpoints/latest.*"))
    state, _ = Run.open(run).load_checkpoint("qlearning")
    assert 0 < state["state"]["loop"]["step"] < 6000  # episodes played
    assert not (run / "summary.json").exists()
    assert main(["train", "--resume", str(run), "--no-media"]) == 0
    assert comparable(run) == comparable(uninterrupted)


def test_a_run_another_process_trains_cannot_be_resumed_beside_it(run_copy, capsys):
    (run_copy / "summary.json").unlink()  # unfinished again: resumable
    other = Run.open(run_copy)
    other.hold()  # as the process training it would (flock: per open file, so in-process too)
    try:
        assert main(["train", "--resume", str(run_copy), "--no-media"]) != 0
        message = one_error_line(capsys)
        assert "is being trained by another process" in message
        assert f"pid {os.getpid()}" in message
    finally:
        other.release()
    assert main(["train", "--resume", str(run_copy), "--no-media"]) == 0
    capsys.readouterr()
    finished = Run.open(run_copy)
    finished.hold()  # the resumed training gave its lock back
    finished.release()


def test_first_signal_asks_second_interrupts_and_handlers_are_restored():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with GracefulInterrupt() as interrupt:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs between bytecodes
        assert interrupt.requested and interrupt.signal == signal.SIGTERM
        assert exit_status() == 143
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(1)
        assert exit_status() == 129
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_worker_forked_inside_the_loop_still_dies_on_sigterm():
    """Subprocess env workers are forked while the handler is installed; their parent must
    still be able to terminate them."""
    with GracefulInterrupt():
        pid = os.fork()
        if pid == 0:  # the child: wait to be terminated
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


def test_an_ignored_hangup_stays_ignored():
    """Under `nohup` SIGHUP is ignored on purpose; the loop must not turn it back on."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with GracefulInterrupt() as interrupt:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.01)
            assert not interrupt.requested
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


# ---- resuming a finished run ----------------------------------------------------------------


def test_resuming_a_finished_run_does_nothing_and_says_so(run_copy, capsys):
    metrics = (run_copy / "metrics.jsonl").read_bytes()
    summary = json.loads((run_copy / "summary.json").read_text())
    step = read_jsonl(run_copy / "metrics.jsonl")[-1]["step"]
    assert summary["finished_step"] == step
    capsys.readouterr()
    assert main(["train", "--resume", str(run_copy), "--no-media"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"run {run_copy} already finished at step {step}; nothing to resume (to train it "
        f"further: payoff train --resume {run_copy} total_episodes=N)"
    )
    assert (run_copy / "metrics.jsonl").read_bytes() == metrics
    assert json.loads((run_copy / "summary.json").read_text()) == summary
    # a run finished before summary.json had `finished_step` is recognised by its final eval
    del summary["finished"], summary["finished_step"]
    (run_copy / "summary.json").write_text(json.dumps(summary))
    assert main(["train", "--resume", str(run_copy), "--no-media"]) == 0
    assert "already finished" in capsys.readouterr().out
    assert (run_copy / "metrics.jsonl").read_bytes() == metrics
    assert sum("final/mean_return" in r for r in read_jsonl(run_copy / "metrics.jsonl")) == 1


def test_a_finished_run_trains_further_to_a_new_length(run_copy, capsys):
    """--resume RUN total_episodes=N (the algorithm's length key) trains a finished run on,
    as SB3's learn(..., reset_num_timesteps=False): same folder, metrics go on, the final
    evaluation runs again at the new end; nothing else of its config can change."""
    before = read_jsonl(run_copy / "metrics.jsonl")
    step = before[-1]["step"]
    capsys.readouterr()
    for argv, message in [
        (["total_episodes=300"], "total_episodes=300 is not past where run"),
        (["total_steps=5000"], "the one setting it takes is the length to train to "),
        (["total_episodes=900", "gamma=0.5"], "got: total_episodes=900 gamma=0.5"),
        (["total_episodes=1.5"], "total_episodes must be a whole number >= 1, got 1.5"),
    ]:
        assert main(["train", "--resume", str(run_copy), *argv, "--no-media"]) != 0
        assert message in one_error_line(capsys)
    assert read_jsonl(run_copy / "metrics.jsonl") == before  # refused: nothing changed

    assert main(["train", "--resume", str(run_copy), "total_episodes=1e3", "--no-media"]) == 0
    summary = json.loads((run_copy / "summary.json").read_text())
    records = read_jsonl(run_copy / "metrics.jsonl")
    assert summary["finished"] and summary["finished_step"] == records[-1]["step"] > step
    assert records[: len(before)] == before  # the first part kept as it was
    extended = [r["event"] for r in records if r.get("event", {}).get("kind") == "extended"]
    assert len(extended) == 1 and "total_episodes 600 -> 1,000" in extended[0]["message"]
    assert sum("final/mean_return" in r for r in records) == 2  # at the old end and the new
    assert "total_episodes: 1000" in (run_copy / "config.yaml").read_text()
    overrides = yaml.safe_load((run_copy / "config.yaml").read_text())["overrides"]
    assert overrides[-1] == "total_episodes=1000"  # plot labels read them: not the old length
    assert not [o for o in overrides[:-1] if o.startswith("total_episodes=")]
    capsys.readouterr()
    assert main(["train", "--resume", str(run_copy), "--no-media"]) == 0
    assert "already finished at step" in capsys.readouterr().out


def test_an_extension_stopped_part_way_stays_resumable_and_a_failed_resume_frees_the_lock(
    run_copy, monkeypatch
):
    from payoff.algos.base import Algorithm
    from payoff.train import finished_step, resume

    def stopped_at_once(self, *args, **kwargs):  # as a SIGTERM before the first new episode
        self.interrupted = True
        return self

    monkeypatch.setattr(Algorithm, "learn", stopped_at_once)
    resume(run_copy, media=False, total=1000)
    assert finished_step(Run.open(run_copy)) is None  # not finished at the old end's step
    monkeypatch.undo()
    config = (run_copy / "config.yaml").read_text()
    (run_copy / "config.yaml").write_text(config + "monitors: [{kind: nope}]\n")
    for _ in range(2):  # the second would meet its own lock if the first had kept it
        with pytest.raises(ConfigError, match="unknown monitor kind 'nope'"):
            resume(run_copy, media=False)


def test_the_lock_does_not_outlive_training_in_forked_env_workers(tmp_path):
    from payoff.train import resume

    argv = ["train", "cartpole-ppo", "total_steps=64", "num_envs=2", "num_steps=32"]
    argv += ["minibatch_size=32", "eval_every=0", "final_eval_episodes=1"]
    before = signal.getsignal(signal.SIGINT)
    assert main([*argv, "vectorization=async", "--out", str(tmp_path), "--no-media"]) == 0
    # AsyncVectorEnv makes one env in the main process too (for the spaces): its workers
    # ignore Ctrl-C, the main process must not (it would train on through every Ctrl-C)
    assert signal.getsignal(signal.SIGINT) == before != signal.SIG_IGN
    run = only_run(tmp_path)
    resume(run, media=False, total=128)  # its AsyncVectorEnv workers were forked holding it
    other = Run.open(run)
    other.hold()
    other.release()


def test_a_kind_of_run_that_cannot_be_trained_further_says_why(run_copy, monkeypatch, capsys):
    from payoff.algos import get_algorithm

    # DAgger's label budget is shared out over its planned rounds: more rounds, more labels
    assert "label_budget" in (get_algorithm("dagger").extend_refusal or "")
    monkeypatch.setattr(get_algorithm("qlearning"), "extend_refusal", "a reason")
    capsys.readouterr()
    assert main(["train", "--resume", str(run_copy), "total_episodes=900", "--no-media"]) != 0
    assert (
        "a qlearning run cannot be trained further in place: a reason; start a new run"
        in one_error_line(capsys)
    )


# ---- bad CLI input: one line ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["frozenlake-q", "seed=-1"], "config key 'seed' must be in [0, 4,294,967,295], got -1"),
        (
            ["frozenlake-q", "--seed", "-1"],
            "config key 'seed' must be in [0, 4,294,967,295], got -1",
        ),
        (
            ["frozenlake-q", "--seed", "99999999999999999999"],  # torch's seed overflowed
            "config key 'seed' must be in [0, 4,294,967,295], got 99999999999999999999",
        ),
        (["frozenlake-q", "gamma=2"], "config key 'gamma' must be in [0, 1], got 2.0"),
        (
            ["frozenlake-q", "learning_rate.start=-1"],
            "config key 'learning_rate.start' must be > 0, got -1.0",
        ),
        (
            ["cartpole-dqn", "learning_rate=-1"],
            "config key 'learning_rate.start' must be > 0, got -1.0",
        ),
        (["cartpole-dqn", "gamma=2"], "config key 'gamma' must be in [0, 1], got 2.0"),
        (["cartpole-ppo", "gae_lambda=1.5"], "config key 'gae_lambda' must be in [0, 1], got 1.5"),
        (["cartpole-ppo", "clip.start=0"], "config key 'clip.start' must be > 0, got 0.0"),
        (["cartpole-ppo", "num_envs=0"], "config key 'num_envs' must be in [1, 100,000], got 0"),
        (["cartpole-ppo", "hidden=[64,0]"], "config key 'hidden[1]' must be > 0, got 0"),
        (
            ["cartpole-dqn", "epsilon.end=1.5"],
            "config key 'epsilon.end' must be in [0, 1], got 1.5",
        ),
    ],
)
def test_out_of_range_numbers_give_one_line_naming_key_value_and_range(
    argv, message, capsys, tmp_path
):
    assert main(["train", *argv, "--out", str(tmp_path)]) == 2
    assert message in one_error_line(capsys)
    assert not list(tmp_path.iterdir()), "a run that cannot start leaves no directory behind"


@pytest.mark.parametrize("command", ["eval", "play"])
@pytest.mark.parametrize("episodes", ["0", "-3"])
def test_non_positive_episodes_give_one_line(finished_run, command, episodes, capsys, tmp_path):
    extra = ["--gif", str(tmp_path / "x.gif")] if command == "play" else []
    assert main([command, str(finished_run), "--episodes", episodes, *extra]) == 2
    assert f"--episodes must be a positive number, got {episodes}" in one_error_line(capsys)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--k", "1,x"], "--k must be positive integers separated by commas (e.g. 1,8), got '1,x'"),
        (["--k", "0"], "--k must be positive integers"),
        (["--k", "1,8"], "--k does not apply to qlearning runs"),
        (["--split", "ood"], "--split does not apply to qlearning runs"),
    ],
)
def test_language_model_eval_options_give_one_line(finished_run, extra, message, capsys):
    assert main(["eval", str(finished_run), "--episodes", "5", *extra]) == 2
    assert message in one_error_line(capsys)


# ---- runs and folders that cannot be written ------------------------------------------------


def _unfinished(run: Path) -> Path:
    (run / "summary.json").unlink()  # so --resume has something to do
    return run


@pytest.fixture
def read_only(monkeypatch):
    """Make a folder read-only: chmod (enough for a normal user), and, since CI runs as root
    (which chmod does not stop), fail every atomic write under it as the kernel would."""
    made: list[Path] = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and any(Path(dir).resolve().is_relative_to(m) for m in made):
            raise PermissionError(errno.EACCES, "Permission denied", str(Path(dir) / ".x.tmp"))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)

    def make(path: Path) -> Path:
        made.append(path.resolve())
        for p in [path, *path.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        return path

    yield make
    for path in made:
        for p in [path, *path.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)


def test_resume_report_and_plot_on_a_read_only_run_give_one_line(run_copy, read_only, capsys):
    run = read_only(_unfinished(run_copy))
    assert main(["train", "--resume", str(run), "--no-media"]) == 2
    err = one_error_line(capsys)
    assert f"cannot write run '{run}'" in err and "Permission denied" in err
    assert "must be writable" in err
    assert main(["report", str(run)]) == 2
    err = one_error_line(capsys)
    assert f"cannot write the report of '{run}'" in err and "Permission denied" in err
    assert main(["plot", str(run), "--out", str(run / "curves.png")]) == 2
    err = one_error_line(capsys)
    assert "cannot write the plot" in err and "pass --out with a path you can write to" in err


def test_real_write_failures_give_one_line_even_as_root(run_copy, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["plot", str(run_copy), "--out", str(blocker / "curves.png")]) == 2
    assert "cannot write the plot" in one_error_line(capsys)
    assert main(["play", str(run_copy), "--gif", str(blocker / "ep.gif")]) == 2
    assert "cannot write the GIF" in one_error_line(capsys)
    shutil.rmtree(run_copy / "media")
    (run_copy / "media").write_text("")  # the report's folder is a file
    assert main(["report", str(run_copy)]) == 2
    assert "cannot write the report" in one_error_line(capsys)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="as a normal user the chmod test above already meets real permission errors",
)
def test_read_only_run_as_a_process_without_root_powers(run_copy):
    """Root without CAP_DAC_OVERRIDE meets file permissions as a normal user does."""
    run = _unfinished(run_copy)
    for p in [run, *run.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    try:
        probe = subprocess.run([*drop, "touch", str(run / "probe")], capture_output=True)
        if probe.returncode == 0:
            pytest.skip("setpriv could not drop the capabilities here")
        for argv in (["train", "--resume", str(run)], ["report", str(run)]):
            done = subprocess.run(
                [*drop, sys.executable, "-m", "payoff.cli", *argv],
                env=ENV,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 2, done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: cannot write"), done.stderr
    finally:
        for p in [run, *run.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)


# ---- ranges, declared once ------------------------------------------------------------------


@pytest.mark.parametrize("algo", available_algorithms())
def test_every_algorithm_default_config_is_in_range(algo):
    check_ranges(get_algorithm(algo).config_class())


def test_every_shipped_recipe_is_in_range():
    from payoff import train
    from payoff.recipes import list_recipes, load_recipe

    for name, _ in list_recipes():
        _, data = load_recipe(name)
        if data.get("kind") == "experiment":
            for member in data["members"]:
                train.resolve(member["recipe"], member.get("overrides", []))
        else:
            train.resolve(name)


def test_schedules_are_checked_at_both_ends():
    qlearning = get_algorithm("qlearning").config_class
    with pytest.raises(ConfigError, match=r"'learning_rate.end' must be >= 0, got -0.1"):
        from_dict(qlearning, {"learning_rate": {"start": 0.1, "end": -0.1}})
    # a linear learning rate may anneal to exactly zero; an exponential one cannot reach it
    from_dict(qlearning, {"learning_rate": {"start": 0.1, "end": 0.0}})
    with pytest.raises(ConfigError, match="exponential schedule needs start and end > 0"):
        from_dict(qlearning, {"learning_rate": {"start": 0.1, "end": 0.0, "kind": "exponential"}})
    with pytest.raises(ConfigError, match=r"'epsilon.start' must be in \[0, 1\], got 2.0"):
        from_dict(qlearning, {"epsilon": {"start": 2.0}})
    with pytest.raises(ConfigError, match=r"'epsilon.fraction' must be in \(0, 1\], got 0"):
        from_dict(qlearning, {"epsilon": {"fraction": 0}})


@dataclasses.dataclass
class CustomConfig:
    gamma: float = dataclasses.field(default=0.5, metadata=in_range(0, 1))  # declared beside it
    free: float = 0.5  # declares no range: any finite value
    share: float = dataclasses.field(default=0.25, metadata=in_range(0, 0.5))  # its own range
    seed: int = dataclasses.field(default=0, metadata={"range": None})  # opted out


def test_nan_is_out_of_range_and_metadata_declares_a_field_own_range():
    with pytest.raises(ConfigError, match="'gamma' must be in"):
        from_dict(get_algorithm("qlearning").config_class, {"gamma": math.nan})
    assert from_dict(CustomConfig, {"seed": -5}).seed == -5
    with pytest.raises(ConfigError, match=r"config key 'share' must be in \[0, 0.5\], got 0.75"):
        from_dict(CustomConfig, {"share": 0.75})
    with pytest.raises(ConfigError, match=r"config key 'gamma' must be in \[0, 1\], got 1.5"):
        from_dict(CustomConfig, {"gamma": 1.5})
    assert from_dict(CustomConfig, {"free": -7.5}).free == -7.5  # no range by name any more


def test_a_damaged_summary_or_metrics_line_is_named_not_a_traceback(run_copy, capsys):
    summary = run_copy / "summary.json"
    kept = summary.read_text()
    for damaged, said in (("{bad", "is not valid JSON"), ("[1, 2]", "holds a list")):
        summary.write_text(damaged)
        # the page is still written, and says why it shows no summary
        assert main(["report", str(run_copy)]) == 0
        page = (run_copy / "media" / "report.html").read_text()
        assert "Its summary is not shown" in page and said in page
        capsys.readouterr()
        assert main(["train", "--resume", str(run_copy)]) != 0
        assert "delete it to resume the run from its checkpoint" in capsys.readouterr().err
    run = Run(run_copy)
    with pytest.warns(RuntimeWarning, match="holds a list.*writing a new one"):
        run.write_summary(note="rewritten")
    assert run.summary() == {"note": "rewritten"}
    summary.write_text(kept)
    with open(run_copy / "metrics.jsonl", "a") as metrics:
        metrics.write('[1, 2]\n"text"\n{"step": 5, "train/lo')  # not records; a torn line
    records = read_jsonl(run_copy / "metrics.jsonl")
    assert records and all(isinstance(r, dict) for r in records)
    assert main(["report", str(run_copy)]) == 0
