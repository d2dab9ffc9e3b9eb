"""The optional W&B and MLflow loggers, run offline with the real packages and read back with
them; the choice of loggers and its errors; a logger failing mid-run."""

import json
import struct
import sys
from pathlib import Path

import pytest

from payoff.core.errors import ConfigError
from payoff.track import loggers
from payoff.track.run import Run
from payoff.train import train

# a short FrozenLake run that still logs training, evaluations and a final evaluation
SHORT = [
    "total_episodes=300",
    "log_every=50",
    "eval_every=100",
    "eval_episodes=10",
    "final_eval_episodes=10",
    "checkpoint_every=1000",
]

# mlflow 3's SQLite store calls an SQLAlchemy 2.1 deprecated loader; not ours to fix
SQLALCHEMY_NOLOAD = "ignore:The ``noload`` loader strategy is deprecated"


@pytest.fixture
def no_tracker_env(monkeypatch, tmp_path):
    """No logger choice from the caller's shell, and W&B's own folders inside tmp_path."""
    for name in ("PAYOFF_LOGGERS", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name in ("CACHE", "CONFIG", "DATA", "ARTIFACT"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / f"wandb-{name.lower()}"))
    monkeypatch.setenv("WANDB_MODE", "offline")


def final_value(run: Run, key: str) -> float:
    return [r[key] for r in run.records() if key in r][-1]


def read_wandb_log(path: Path) -> list:
    """The records of a W&B transaction log (run-<id>.wandb): protobuf `Record`s framed as a
    LevelDB log (32 KiB blocks; each chunk a 7-byte header: crc32c, length, type)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    block, pos, pending, records = 32 * 1024, 7, b"", []
    while pos + 7 <= len(data):
        left_in_block = block - pos % block
        if left_in_block < 7:  # a block's tail too short for a header is zero padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
        elif kind == 0:
            break
    return records


def test_wandb_offline_run_holds_the_metrics_and_config(no_tracker_env, monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("PAYOFF_LOGGERS", "wandb")
    monkeypatch.setenv("PAYOFF_WANDB_PROJECT", "payoff-tests")
    run = train("frozenlake-q", overrides=SHORT, out=tmp_path / "runs", media=False)

    wandb_id = json.loads((run.path / "trackers.json").read_text())["wandb"]["id"]
    (log_file,) = (run.path / "wandb").glob(f"offline-run-*-{wandb_id}/run-{wandb_id}.wandb")
    records = read_wandb_log(log_file)
    kinds = [r.WhichOneof("record_type") for r in records]
    (header,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert header.display_name == run.path.name and header.project == "payoff-tests"

    config = {item.key: json.loads(item.value_json) for item in header.config.update}
    assert config["recipe"] == "frozenlake-q" and config["total_episodes"] == 300
    assert config["env"]["id"] == "FrozenLake-v1"

    history: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") != "history":
            continue
        for item in record.history.item:
            key = item.key or ".".join(item.nested_key)
            if not key.startswith("_"):  # _step, _runtime, _timestamp: W&B's own
                history.setdefault(key, []).append(
                    (record.history.step.num, json.loads(item.value_json))
                )
    logged = [
        (r["step"], r["eval/success_rate"]) for r in run.records() if "eval/success_rate" in r
    ]
    assert history["eval/success_rate"] == logged and len(logged) == 3
    final_success = final_value(run, "final/success_rate")
    assert history["final/success_rate"][-1][1] == pytest.approx(final_success)
    assert "exit" in kinds, "the W&B run was finished"


@pytest.mark.filterwarnings(SQLALCHEMY_NOLOAD)
def test_mlflow_sqlite_store_holds_the_metrics_and_params(no_tracker_env, monkeypatch, tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("PAYOFF_LOGGERS", "mlflow")
    run = train("frozenlake-q", overrides=SHORT, out=tmp_path / "runs", media=False)

    saved = json.loads((run.path / "trackers.json").read_text())["mlflow"]
    # by default the store is an SQLite file beside the run directories
    assert saved["tracking_uri"] == f"sqlite:///{(tmp_path / 'runs' / 'mlflow.db').resolve()}"
    client = MlflowClient(saved["tracking_uri"])
    mlflow_run = client.get_run(saved["run_id"])
    assert mlflow_run.info.run_name == run.path.name and mlflow_run.info.status == "FINISHED"
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "payoff"
    params = mlflow_run.data.params
    assert params["recipe"] == "frozenlake-q" and params["total_episodes"] == "300"
    assert params["env.id"] == "FrozenLake-v1" and params["epsilon.start"] == "1.0"

    history = client.get_metric_history(saved["run_id"], "eval/success_rate")
    logged = [
        (r["step"], r["eval/success_rate"]) for r in run.records() if "eval/success_rate" in r
    ]
    assert sorted((m.step, m.value) for m in history) == logged
    (final,) = client.get_metric_history(saved["run_id"], "final/success_rate")
    assert final.value == pytest.approx(final_value(run, "final/success_rate"))


@pytest.mark.filterwarnings(SQLALCHEMY_NOLOAD)
def test_mlflow_honours_its_tracking_uri_and_resumes_the_same_run(
    no_tracker_env, monkeypatch, tmp_path
):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "tracker-tests")
    run = Run.create(tmp_path / "runs", "demo", {"algo": "x"}, loggers=["mlflow"])
    run.log(1, **{"train/return": 1.5, "value[0]": 2.0})  # "[" is refused by MLflow
    run.close()
    # resuming reads the choice from trackers.json and continues the same MLflow run
    resumed = Run.open(run.path)
    resumed.log(2, **{"train/return": 2.5})
    resumed.close()

    saved = json.loads((run.path / "trackers.json").read_text())
    assert saved["loggers"] == ["mlflow"] and saved["mlflow"]["tracking_uri"] == uri
    client = MlflowClient(uri)
    (mlflow_run,) = client.search_runs(
        [client.get_experiment_by_name("tracker-tests").experiment_id]
    )
    assert mlflow_run.info.run_id == saved["mlflow"]["run_id"]
    history = client.get_metric_history(mlflow_run.info.run_id, "train/return")
    assert sorted((m.step, m.value) for m in history) == [(1, 1.5), (2, 2.5)]
    assert mlflow_run.data.metrics["value_0_"] == 2.0
    assert not (tmp_path / "runs" / "mlflow.db").exists()


def test_tensorboard_alone_by_default(no_tracker_env, tmp_path):
    pytest.importorskip("tensorboard")
    run = Run.create(tmp_path, "demo", {"algo": "x"})
    run.log(1, **{"train/return": 1.0})
    run.close()
    assert list(run.path.glob("events.out.tfevents.*"))
    assert not (run.path / "trackers.json").exists() and not (run.path / "wandb").exists()


def test_unknown_logger_is_refused_before_the_run_directory(no_tracker_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PAYOFF_LOGGERS", "tensorbord,wandb")
    with pytest.raises(ConfigError) as err:
        Run.create(tmp_path / "runs", "demo", {})
    assert str(err.value) == (
        "unknown logger 'tensorbord' in PAYOFF_LOGGERS; valid: tensorboard, wandb, mlflow "
        "(comma-separated), or none. Did you mean 'tensorboard'?"
    )
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ConfigError, match="unknown logger 'neptune' in loggers; valid: "):
        Run.create(tmp_path / "runs", "demo", {}, loggers=["neptune"])


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [("wandb", "wandb", "wandb"), ("mlflow", "mlflow", "mlflow"), ("mlflow", "alembic", "mlflow")],
)
def test_missing_package_names_the_extra(
    no_tracker_env, monkeypatch, tmp_path, name, module, extra
):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails
    with pytest.raises(ConfigError) as err:
        Run.create(tmp_path / "runs", "demo", {}, loggers=name)
    assert str(err.value) == (
        f"the {name} logger needs the {module!r} package, which is not installed: "
        f"pip install 'payoff[{extra}]'"
    )
    assert not (tmp_path / "runs").exists()


def test_a_failing_logger_warns_once_and_training_goes_on(no_tracker_env, monkeypatch, tmp_path):
    pytest.importorskip("tensorboard")

    def full_disk(self, step, scalars):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loggers.TensorBoardLogger, "log", full_disk)
    monkeypatch.setenv("PAYOFF_LOGGERS", "tensorboard")
    with pytest.warns(RuntimeWarning) as caught:
        run = train("frozenlake-q", overrides=SHORT, out=tmp_path / "runs", media=False)
    failures = [w for w in caught if "tensorboard logger failed" in str(w.message)]
    assert len(failures) == 1
    assert str(failures[0].message) == (
        "the tensorboard logger failed logging and is off for the rest of this run "
        "(OSError: [Errno 28] No space left on device); training goes on, and metrics.jsonl "
        "keeps every record"
    )
    assert run.summary()["finished"] and final_value(run, "final/success_rate") is not None


def test_cli_track_flag_chooses_the_loggers(no_tracker_env, tmp_path, capsys):
    from payoff.cli import main

    out = tmp_path / "runs"
    assert (
        main(["train", "frozenlake-q", *SHORT, "--track", "none", "--out", str(out), "--no-media"])
        == 0
    )
    (run,) = out.iterdir()
    assert not list(run.glob("events.out.tfevents.*"))  # not even TensorBoard
    assert main(["train", "frozenlake-q", "--track", "wandbb", "--out", str(out)]) != 0
    assert "unknown logger 'wandbb' in loggers" in capsys.readouterr().err


def test_an_mlflow_server_that_does_not_answer_is_dropped_at_once(
    no_tracker_env, monkeypatch, tmp_path
):
    # its client retried a dead server for minutes while training waited
    import socket
    import time

    pytest.importorskip("mlflow")
    with socket.socket() as closed:  # a free port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAYOFF_LOGGERS", "mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.warns(RuntimeWarning, match="no MLflow server answers at http://127.0.0.1"):
        run = train("frozenlake-q", overrides=SHORT, out=tmp_path / "runs", media=False)
    assert time.monotonic() - started < 60 and run.summary()["final_eval"]["episodes"] > 0


def test_behind_a_proxy_the_mlflow_check_asks_the_proxy(monkeypatch):
    """A server reached only through HTTP(S)_PROXY is not refused for failing a direct
    connection; a dead proxy is named; NO_PROXY hosts are checked directly."""
    import socket

    from payoff.track.loggers import _check_server

    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))
        alive, dead = listening.getsockname()[1], closed.getsockname()[1]
        for name in ("no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{alive}")
        _check_server(f"http://127.0.0.1:{dead}")  # the proxy answers for it
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{dead}")
        with pytest.raises(ConnectionError, match="through the proxy 127.0.0.1"):
            _check_server("http://mlflow.example:5000")
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        _check_server(f"http://127.0.0.1:{alive}")  # bypassed: the server itself answers
