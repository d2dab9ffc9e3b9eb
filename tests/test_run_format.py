import json
import time

import pytest

from payoff.core.errors import CheckpointError, RunError
from payoff.track.run import Run, load_checkpoint_file


def test_run_directory_layout_and_never_overwrite(tmp_path):
    first = Run.create(tmp_path, "demo", {"algo": "x"})
    second = Run.create(tmp_path, "demo", {"algo": "x"})
    assert first.path != second.path
    for run in (first, second):
        assert (run.path / "config.yaml").is_file()
        assert (run.path / "checkpoints").is_dir() and (run.path / "media").is_dir()


def test_metrics_and_events_round_trip(tmp_path):
    run = Run.create(tmp_path, "demo", {"algo": "x"})
    run.log(1, **{"train/return": 1.5})
    run.event(2, "alarm", "something happened", severity="critical", detail=3)
    run.log(3, **{"train/return": float("nan")})
    run.close()
    records = run.records()
    assert [r["step"] for r in records] == [1, 3]
    assert records[1]["train/return"] is None
    assert run.events()[0]["event"]["evidence"] == {"detail": 3}
    # a torn last line (a run killed mid-write) is ignored, not fatal
    with open(run.path / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 4, "trai')
    assert len(run.records()) == 2
    run.truncate_metrics(1, elapsed=run.elapsed())
    assert [
        json.loads(line)["step"] for line in (run.path / "metrics.jsonl").read_text().splitlines()
    ] == [1]


def test_resuming_drops_what_was_logged_at_the_checkpoints_step_after_it(tmp_path):
    """A final evaluation cut short by Ctrl-C logs at the last checkpoint's step, after it:
    the resumed run logs it again, so the partial one goes (kept: what came before)."""
    run = Run.create(tmp_path, "demo", {"algo": "x"})
    run.log(5, **{"eval/mean_return": 1.0})
    run.save_checkpoint({"a": 1}, algo="x")
    _, elapsed = run.load_checkpoint("x")
    time.sleep(0.01)
    run.log(5, **{"final/mean_return": 2.0})  # the interrupted final evaluation
    run.close()
    run.truncate_metrics(5, elapsed)
    assert [sorted(r) for r in run.records()] == [["eval/mean_return", "step", "time"]]


def test_checkpoint_errors(tmp_path):
    run = Run.create(tmp_path, "demo", {"algo": "x"})
    with pytest.raises(CheckpointError, match="no checkpoint"):
        run.load_checkpoint("x")
    run.save_checkpoint({"a": 1}, algo="x")
    assert run.load_checkpoint("x")[0] == {"a": 1}
    with pytest.raises(CheckpointError, match="written by algorithm 'x', but this run uses 'y'"):
        run.load_checkpoint("y")
    run.checkpoint_path().write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint_file(run.checkpoint_path(), "x")
    assert not list(run.checkpoints.glob("*.tmp")), "atomic writes leave no temp files"


def test_open_errors(tmp_path):
    with pytest.raises(RunError, match="does not exist"):
        Run.open(tmp_path / "missing")
    with pytest.raises(RunError, match="not a payoff run"):
        Run.open(tmp_path)


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RunError, match="cannot create output directory"):
        Run.create(blocker / "runs", "demo", {})


def test_taking_the_lock_removes_temp_files_a_killed_writer_left(tmp_path):
    """A process killed mid-write leaves `.NAME.xxxx.tmp` beside the (whole) file it was
    replacing; the next process to train the run removes them."""
    run = Run.create(tmp_path, "torn", {"algo": "ppo"})
    run.release()
    torn = [
        run.checkpoints / ".latest.safetensors.k3j2.tmp",
        run.media / ".report.html.x9.tmp",
        run.path / ".summary.json.a1.tmp",
    ]
    for path in torn:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"half")
    (run.checkpoints / "latest.safetensors").write_bytes(b"whole")
    again = Run.open(run.path)
    again.hold()
    assert not any(path.exists() for path in torn)
    assert (run.checkpoints / "latest.safetensors").read_bytes() == b"whole"


def test_a_file_where_the_checkpoints_folder_goes_is_named(tmp_path):
    run = Run.create(tmp_path, "f", {"algo": "ppo"})
    run.release()
    (run.checkpoints).rmdir()
    run.checkpoints.write_text("not a folder")
    with pytest.raises(RunError, match="holds a file named 'checkpoints' where its checkpoints"):
        Run.open(run.path)


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    """ENOSPC names no file; the error that reaches the user does (the CLI prints its name)."""
    from payoff.cli import _os_reason
    from payoff.core import io

    run = Run.create(tmp_path, "full", {"algo": "ppo"})
    run._metrics_file = open("/dev/full", "w", buffering=1)  # noqa: SIM115 (each line: ENOSPC)
    with pytest.raises(OSError) as caught:
        run.log(1, loss=0.5)
    with pytest.raises(OSError):  # what is still buffered cannot be written either
        run._metrics_file.close()
    assert caught.value.errno == 28 and caught.value.filename == str(run.path / "metrics.jsonl")
    assert _os_reason(caught.value) == f"No space left on device: '{run.path / 'metrics.jsonl'}'"
    run._metrics_file = None

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", full)
    with pytest.raises(OSError) as caught:
        io.atomic_write_text(tmp_path / "summary.json", "{}")
    assert caught.value.filename == str(tmp_path / "summary.json")
    assert not list(tmp_path.glob(".summary.json.*.tmp"))  # the temp file is gone
    # an error that names a file is kept
    with pytest.raises(OSError, match="already named"), io.writing_to(tmp_path / "other"):
        raise FileNotFoundError(2, "already named", str(tmp_path / "x"))


def test_an_over_long_line_is_passed_over_without_being_read_whole(tmp_path, monkeypatch):
    from payoff.track import run as run_module

    monkeypatch.setattr(run_module, "MAX_RECORD_BYTES", 64)
    path = tmp_path / "metrics.jsonl"
    long = json.dumps({"step": 2, "pad": "x" * 500})
    path.write_text(f'{{"step": 1}}\n{long}\n{{"step": 3}}\n' + '{"step": 4, "torn"')
    assert [r["step"] for r in run_module.read_jsonl(path)] == [1, 3]
    path.write_text('{"step": 1}\n' + '{"step": 2, "a": "' + "y" * 200)  # a long torn last line
    assert [r["step"] for r in run_module.read_jsonl(path)] == [1]


def test_a_resumed_process_finds_the_runs_first_evaluation_in_its_file(tmp_path):
    """GRPO, agent GRPO and PPO-RLHF took their 'start' score from the process's history,
    which after a resume begins at the checkpoint: 'from 0.062' instead of 'from 0.000'."""
    from payoff.algos.qlearning import QLearning

    run = Run.create(tmp_path, "r", {"algo": "qlearning"})
    run.log(0, **{"eval/accuracy": 0.0})
    run.log(10, **{"eval/accuracy": 0.5})
    agent = QLearning("FrozenLake-v1", run=run)
    agent.history = [{"step": 10, "eval/accuracy": 0.5}]  # what a resumed process holds
    assert agent.first_logged("eval/accuracy")["step"] == 0
    assert QLearning("FrozenLake-v1").first_logged("eval/accuracy") is None  # no run, no history


def test_a_report_of_a_run_still_training_says_so(tmp_path):
    import os

    from payoff.report.page import write_report

    run = Run.create(tmp_path, "live", {"algo": "ppo"})
    run.log(64, loss=0.5)
    trainer = Run.open(run.path)  # the lock taken as a training process takes it
    trainer.hold()
    try:
        reader = Run.open(run.path)
        assert reader.trainer_pid() == os.getpid()
        page = write_report(reader).read_text()
        assert f"still training (pid {os.getpid()})" in page and "by step 64" in page
        assert trainer.trainer_pid() is None  # the trainer's own report says nothing of it
    finally:
        trainer.release()
    assert Run.open(run.path).trainer_pid() is None
    assert "still training" not in write_report(Run.open(run.path)).read_text()


def test_a_moment_of_someone_probing_the_lock_does_not_refuse_a_trainer(tmp_path):
    """A report's trainer_pid() probe holds the lock for a moment: a resume starting then was
    refused as 'being trained by another process' (492 of 2,763 tries in a loop)."""
    import fcntl
    import os
    import threading
    import time

    run = Run.create(tmp_path, "probe", {"algo": "ppo"})
    run.hold()  # as a trainer that has since ended
    run.release()
    fd = os.open(run.path / ".lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a probe, caught in the act
    threading.Thread(target=lambda: (time.sleep(0.1), fcntl.flock(fd, fcntl.LOCK_UN))).start()
    trainer = Run.open(run.path)
    trainer.hold()  # waits out the probe instead of refusing
    trainer.release()
    os.close(fd)
