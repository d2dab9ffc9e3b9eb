"""Where a run's metrics go besides metrics.jsonl: TensorBoard (the default), W&B and MLflow.

metrics.jsonl is always written and stays the run's own record; a logger copies the numbers
of each record to a tracker. Choose them with `Run.create(..., loggers=["wandb"])` or, from
the command line, with environment variables:

    PAYOFF_LOGGERS          comma-separated: tensorboard, wandb, mlflow, or none
                            (default: tensorboard)
    PAYOFF_WANDB_PROJECT    the W&B project (else WANDB_PROJECT, else "payoff");
                            W&B reads WANDB_MODE itself: WANDB_MODE=offline needs no network
    MLFLOW_TRACKING_URI     where MLflow writes (default: sqlite:///<runs folder>/mlflow.db)
    MLFLOW_EXPERIMENT_NAME  the MLflow experiment (default: "payoff")

Each tracker's package is an extra (`pip install 'payoff[wandb]'`), imported only when its
logger opens, which is at the run's first record. A run that asks for a tracker whose package
is missing is refused before it starts; a tracker that fails once the run is going (a network
error, a full disk) is warned about once and dropped, and training goes on.

The W&B run id and the MLflow run id are kept in trackers.json in the run directory, so that
resuming a payoff run continues the same tracker run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from payoff.core.errors import ConfigError, suggest
from payoff.core.io import atomic_write_text

LOGGERS_ENV = "PAYOFF_LOGGERS"
DEFAULT_LOGGERS = ("tensorboard",)
STATE_FILE = "trackers.json"


class Logger:
    """One tracker for one run. Constructing it opens the tracker (and may raise)."""

    name: ClassVar[str]
    extra: ClassVar[str]  # the payoff extra that installs its package

    @classmethod
    def modules(cls) -> tuple[str, ...]:
        """The importable packages it needs: by default the one its extra is named after."""
        return (cls.extra,)

    def __init__(self, run_path: Path, config: dict[str, Any], saved: dict[str, Any]):
        """Open the tracker for the run at `run_path`; `saved` is what `state()` returned the
        last time this run opened it (empty for a new run)."""

    def log(self, step: int, scalars: dict[str, float]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        """What resuming needs to continue the same tracker run (kept in trackers.json)."""
        return {}


class TensorBoardLogger(Logger):
    """events.* files in the run directory, through torch's SummaryWriter."""

    name = "tensorboard"
    extra = "tensorboard"

    def __init__(self, run_path: Path, config: dict[str, Any], saved: dict[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_path))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger(Logger):
    """A W&B run in <run>/wandb/, named after the payoff run, with its config."""

    name = "wandb"
    extra = "wandb"

    def __init__(self, run_path: Path, config: dict[str, Any], saved: dict[str, Any]):
        import wandb

        project = (
            os.environ.get("PAYOFF_WANDB_PROJECT") or os.environ.get("WANDB_PROJECT") or "payoff"
        )
        resume: dict[str, Any] = {"id": saved["id"], "resume": "allow"} if "id" in saved else {}
        # create_new: several payoff runs in one process (experiments, tests) are separate
        # W&B runs, and a user's own wandb.run is left alone
        self.run = wandb.init(
            project=project,
            dir=str(run_path),
            name=run_path.name,
            config=config,
            reinit="create_new",
            **resume,
        )

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()

    def state(self) -> dict[str, Any]:
        return {"id": self.run.id}


# MLflow refuses metric and param names with other characters; they become "_"
_MLFLOW_REFUSED = re.compile(r"[^A-Za-z0-9_\-. :/]")
_MLFLOW_BATCH = 100  # params per log_batch call: the limit a tracking server enforces
_MLFLOW_PARAM_CHARS = 500  # the longest param value every MLflow version accepts


def mlflow_key(key: str) -> str:
    """`key` with the characters MLflow refuses in a metric or param name replaced by '_'."""
    return _MLFLOW_REFUSED.sub("_", key)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"env": {"id": "X"}} -> {"env.id": "X"}: nested config as MLflow params."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


class MLflowLogger(Logger):
    """An MLflow run with the flattened config as params; by default in an SQLite store next
    to the run directories (MLflow 3 refuses a plain-file ./mlruns store)."""

    name = "mlflow"
    extra = "mlflow"

    @classmethod
    def modules(cls) -> tuple[str, ...]:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        sqlite = not uri or uri.startswith("sqlite:")
        return ("mlflow", "sqlalchemy", "alembic") if sqlite else ("mlflow",)

    def __init__(self, run_path: Path, config: dict[str, Any], saved: dict[str, Any]):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        runs_folder = run_path.resolve().parent
        default_uri = f"sqlite:///{runs_folder / 'mlflow.db'}"
        self.tracking_uri = os.environ.get("MLFLOW_TRACKING_URI") or default_uri
        if self.tracking_uri.startswith(("http://", "https://")):
            _check_server(self.tracking_uri)
        # a client of its own, not mlflow's global active run: the user's mlflow state is theirs
        self.client = MlflowClient(self.tracking_uri)
        if saved.get("tracking_uri") == self.tracking_uri and saved.get("run_id"):
            self.run_id = str(saved["run_id"])
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "payoff"
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            # with the default store, artifacts stay beside it rather than in the working dir
            artifacts = (runs_folder / "mlartifacts").as_uri()
            experiment_id = self.client.create_experiment(
                experiment_name,
                artifact_location=artifacts if self.tracking_uri == default_uri else None,
            )
        run = self.client.create_run(
            experiment_id, run_name=run_path.name, tags={"payoff.run_dir": str(run_path)}
        )
        self.run_id = run.info.run_id
        params = [
            Param(mlflow_key(key), _param_text(value)[:_MLFLOW_PARAM_CHARS])
            for key, value in flatten(config).items()
        ]
        for start in range(0, len(params), _MLFLOW_BATCH):
            self.client.log_batch(self.run_id, params=params[start : start + _MLFLOW_BATCH])

    def log(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        metrics = [
            Metric(mlflow_key(key), float(value), now_ms, step) for key, value in scalars.items()
        ]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)

    def state(self) -> dict[str, Any]:
        return {"tracking_uri": self.tracking_uri, "run_id": self.run_id}


def _check_server(uri: str) -> None:
    """Fail at once when nothing answers at an MLflow server's address: its client retries
    a dead server for minutes, while training waits. A server that answers and then goes
    away gets 2 retries of at most 10 s (unless MLFLOW_HTTP_REQUEST_* say otherwise)."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(uri)
    host = parts.hostname or ""
    proxy = getproxies().get(parts.scheme)
    if proxy and not proxy_bypass(host):  # requests goes through it: check the proxy answers
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=5).close()
    except OSError as err:
        via = f" (through the proxy {parts.hostname}:{port})" if parts.hostname != host else ""
        raise ConnectionError(f"no MLflow server answers at {uri}{via} ({err})") from None
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


LOGGERS: dict[str, type[Logger]] = {
    logger.name: logger for logger in (TensorBoardLogger, WandbLogger, MLflowLogger)
}


@dataclass(frozen=True)
class LoggerChoice:
    """The loggers of a run, and whether someone asked for them: the default (TensorBoard)
    may be missing quietly, as tensorboard is an extra too."""

    names: tuple[str, ...]
    asked: bool


def choose_loggers(
    requested: Sequence[str] | str | None = None, recorded: Sequence[str] | None = None
) -> LoggerChoice:
    """The loggers asked for: `requested` (a list or "a,b"), else $PAYOFF_LOGGERS, else the
    ones a resumed run `recorded`, else TensorBoard. Unknown names are a ConfigError."""
    if requested is not None:
        where, names = "loggers", _split(requested)
    elif os.environ.get(LOGGERS_ENV, "").strip():
        where, names = LOGGERS_ENV, _split(os.environ[LOGGERS_ENV])
    elif recorded is not None:
        where, names = STATE_FILE, list(recorded)
    else:
        return LoggerChoice(DEFAULT_LOGGERS, asked=False)
    if names == ["none"]:
        return LoggerChoice((), asked=True)
    for name in names:
        if name not in LOGGERS:
            raise ConfigError(
                f"unknown logger {name!r} in {where}; valid: {', '.join(LOGGERS)} "
                f"(comma-separated), or none.{suggest(name, LOGGERS)}"
            )
    return LoggerChoice(tuple(dict.fromkeys(names)), asked=True)


def _split(requested: Sequence[str] | str) -> list[str]:
    parts = requested.split(",") if isinstance(requested, str) else list(requested)
    return [part.strip().lower() for part in parts if part.strip()]


def missing_package(logger: type[Logger]) -> str | None:
    """Why `logger` cannot open ('... pip install ...'), or None when its packages are there."""
    for module in logger.modules():
        if importlib.util.find_spec(module) is None:
            return (
                f"the {logger.name} logger needs the {module!r} package, which is not "
                f"installed: pip install 'payoff[{logger.extra}]'"
            )
    return None


def check_installed(choice: LoggerChoice) -> None:
    """Refuse, before a run starts, loggers that were asked for but whose package is missing."""
    if not choice.asked:
        return
    for name in choice.names:
        problem = missing_package(LOGGERS[name])
        if problem:
            raise ConfigError(problem)


class Loggers:
    """The open loggers of one run.

    They open at the first record (so opening a run to read it starts no tracker) and close
    with the run; a later record opens them again, continuing the same tracker runs. A logger
    that raises is warned about once and dropped for the rest of the run.
    """

    def __init__(
        self,
        run_path: Path,
        config: Callable[[], dict[str, Any]],
        requested: Sequence[str] | str | None = None,
    ):
        self.run_path = run_path
        self._config = config
        saved = self._read_state()
        recorded = saved.get("loggers")
        self.choice = choose_loggers(requested, recorded if isinstance(recorded, list) else None)
        self._open: list[Logger] | None = None
        self._dropped: set[str] = set()

    def record_choice(self) -> None:
        """Keep the loggers asked for in trackers.json, so that resuming uses them again."""
        if self.choice.asked:
            self._write_state({**self._read_state(), "loggers": list(self.choice.names)})

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if self._open is None:
            self._open = self._open_all()
        for logger in list(self._open):
            self._call(logger, "log", step, scalars)

    def flush(self) -> None:
        for logger in list(self._open or ()):
            self._call(logger, "flush")

    def close(self) -> None:
        for logger in list(self._open or ()):
            self._call(logger, "close")
        self._open = None

    def _open_all(self) -> list[Logger]:
        saved = self._read_state()
        opened: list[Logger] = []
        for name in self.choice.names:
            if name in self._dropped:
                continue
            cls = LOGGERS[name]
            problem = missing_package(cls)
            try:
                if problem:
                    raise ModuleNotFoundError(problem)
                opened.append(cls(self.run_path, self._config(), saved.get(name, {})))
            except Exception as err:
                self._dropped.add(name)
                if self.choice.asked:  # the default TensorBoard may quietly be missing
                    _warn(name, "opening", err)
        state = {logger.name: kept for logger in opened if (kept := logger.state())}
        if state:
            self._write_state({**saved, **state})
        return opened

    def _call(self, logger: Logger, action: str, *args: Any) -> None:
        try:
            getattr(logger, action)(*args)
        except Exception as err:
            _warn(logger.name, action, err)
            self._dropped.add(logger.name)
            if self._open is not None:
                self._open.remove(logger)
            if action != "close":
                try:
                    logger.close()
                except Exception:
                    pass  # it already failed once; the warning has said so

    def _read_state(self) -> dict[str, Any]:
        path = self.run_path / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: dict[str, Any]) -> None:
        atomic_write_text(self.run_path / STATE_FILE, json.dumps(state, indent=2))


_DOING = {"opening": "opening", "log": "logging", "flush": "flushing", "close": "closing"}


def _warn(name: str, action: str, err: Exception) -> None:
    message = str(err) if isinstance(err, ModuleNotFoundError) else f"{type(err).__name__}: {err}"
    if name == "wandb" and action == "opening" and not isinstance(err, ModuleNotFoundError):
        message += "; without a network, WANDB_MODE=offline logs locally for `wandb sync` later"
    warnings.warn(
        f"the {name} logger failed {_DOING[action]} and is off for the rest of this run "
        f"({message}); training goes on, and metrics.jsonl keeps every record",
        RuntimeWarning,
        stacklevel=4,
    )
