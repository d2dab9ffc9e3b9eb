"""A run directory: config.yaml, metrics.jsonl, tracker logs, checkpoints/ and media/.

    runs/<YYYYmmdd-HHMMSS>-<recipe>/
      config.yaml      the fully resolved config
      metrics.jsonl    one JSON object per log step ({"step", "time", ...}); events carry "event"
      summary.json     final evaluation and headline numbers, for reports and scripts
      events.*         TensorBoard events when tensorboard is installed (the default logger)
      wandb/           the W&B run, when the wandb logger is on (payoff.track.loggers)
      trackers.json    the loggers asked for and their tracker run ids, to resume into
      checkpoints/     latest.safetensors (+ best.safetensors): data, never a pickle
                       (payoff.track.checkpoint); enough to resume exactly
      media/           plots, GIFs, report.html

A run directory is never overwritten; resuming continues the same directory.
"""

from __future__ import annotations

import copy
import errno
import io
import json
import math
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from payoff.core.errors import CheckpointError, RunError
from payoff.core.io import (
    MAX_YAML_CHARS,
    TooLarge,
    YAMLTooLarge,
    atomic_write_text,
    check_json_shape,
    read_text_capped,
    safe_yaml,
    writing_to,
)
from payoff.track.checkpoint import load_state, save_state
from payoff.track.loggers import Loggers, check_installed, choose_loggers

CHECKPOINT_FORMAT = 2  # 1 was a torch.save pickle (payoff 0.1), refused on load
CHECKPOINT_SUFFIX = ".safetensors"
LEGACY_SUFFIX = ".pt"


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


_HELD_LOCKS: set[int] = set()  # descriptors of the run locks this process holds


class Run:
    """One training run on disk. Create with `Run.create`, reopen with `Run.open`.

    `loggers` names where metrics go besides metrics.jsonl ("tensorboard", "wandb",
    "mlflow"; a list or "a,b"); None means $PAYOFF_LOGGERS, else what the run recorded, else
    TensorBoard. See payoff.track.loggers.
    """

    def __init__(self, path: str | Path, loggers: Sequence[str] | str | None = None):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.media = self.path / "media"
        self._metrics_file: io.TextIOWrapper | None = None
        self._loggers = Loggers(self.path, lambda: self.config, loggers)
        self._start = time.time()
        self._time_offset = 0.0
        self._lock: int | None = None  # the descriptor holding `.lock` while training
        self._config: tuple[tuple[int, int, int], dict[str, Any]] | None = None  # (stat, data)

    # ---- creation and opening --------------------------------------------------------
    @classmethod
    def create(
        cls,
        out_dir: str | Path,
        name: str,
        config: dict[str, Any],
        loggers: Sequence[str] | str | None = None,
    ) -> Run:
        """Make a fresh run directory `out_dir/<timestamp>-<name>` (never reusing one).

        Unknown loggers, or ones whose package is missing, are refused before the directory
        is made.
        """
        check_installed(choose_loggers(loggers))
        out_dir = Path(out_dir)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            reason = (
                "it is a file, not a folder"  # mkdir says only "File exists"
                if out_dir.exists() and not out_dir.is_dir()
                else err.strerror
            )
            raise RunError(f"cannot create output directory {str(out_dir)!r}: {reason}") from None
        if not os.access(out_dir, os.W_OK | os.X_OK):
            raise RunError(
                f"output directory {str(out_dir)!r} is not writable; pass --out with a folder you can write to"
            )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "run"
        base = out_dir / f"{stamp}-{safe}"
        path, n = base, 1
        while True:
            try:
                path.mkdir(parents=False, exist_ok=False)
                break
            except FileExistsError:
                n += 1
                path = Path(f"{base}-{n}")
            except OSError as err:
                raise RunError(
                    f"cannot create run directory {str(path)!r}: {err.strerror}"
                ) from None
        run = cls(path, loggers)
        run.checkpoints.mkdir()
        run.media.mkdir()
        run.write_config(config)
        run._loggers.record_choice()
        return run

    @classmethod
    def open(cls, path: str | Path, loggers: Sequence[str] | str | None = None) -> Run:
        """Open an existing run directory (for resume, eval, play, report)."""
        path = Path(path)
        if path.is_file():
            raise RunError(
                f"{str(path)!r} is a file, not a run directory: give the folder that holds "
                f"its config.yaml (here {str(path.parent)!r})"
            )
        if not path.is_dir():
            raise RunError(f"run directory {str(path)!r} does not exist")
        if not (path / "config.yaml").is_file():
            raise RunError(f"{str(path)!r} is not a payoff run: it has no config.yaml")
        links = [
            str(entry.relative_to(path))
            for folder in (path, path / "media", path / "checkpoints")
            if folder.is_dir() and (folder == path or not folder.is_symlink())
            for entry in folder.iterdir()
            if entry.is_symlink()
        ]
        if links:
            raise RunError(
                f"run {str(path)!r} holds symbolic links ({', '.join(sorted(links)[:5])}): "
                f"payoff writes none into a run, and reports, checkpoints and resumed metrics "
                f"written through them would change files outside it; remove them"
            )
        run = cls(path, loggers)
        # (a file where media/ goes is a failure to write the report, said where it is made)
        if run.checkpoints.exists() and not run.checkpoints.is_dir():
            raise RunError(
                f"run {str(path)!r} holds a file named 'checkpoints' where its checkpoints "
                f"folder goes: payoff reads and writes a folder there; move the file away"
            )
        run.checkpoints.mkdir(exist_ok=True)
        run.media.mkdir(exist_ok=True)
        return run

    # ---- one process trains a run at a time ---------------------------------------
    def hold(self) -> None:
        """Take the run's lock (flock on `.lock`, which names the holder's pid) for as long
        as this process trains it: two processes resuming one run would interleave its
        metrics and overwrite each other's checkpoints. The lock goes with `release` or
        when the process ends, however it ends. No-op where fcntl is missing (Windows)."""
        if self._lock is not None:
            return
        try:
            import fcntl
        except ImportError:
            return
        # an OSError here (a read-only run) is what writing to the run would raise
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            _flock_soon(fd, fcntl.LOCK_EX)
        except OSError as err:
            if err.errno not in _LOCK_BUSY:
                os.close(fd)  # a filesystem without flock (some network mounts): go on unlocked
                warnings.warn(
                    f"cannot lock run {str(self.path)!r} ({err.strerror}): nothing stops a "
                    f"second process from resuming it at the same time",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise RunError(
                f"run {str(self.path)!r} is being trained by another process{who}; two would "
                f"interleave its metrics and overwrite its checkpoints. Let that one finish, "
                f"or stop it, then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock = fd
        _HELD_LOCKS.add(fd)
        self._remove_torn_writes()

    def trainer_pid(self) -> int | None:  # (probes with a shared lock for a moment)
        """The pid of another process training this run now (it holds the run's lock; 0
        where the lock file names none), else None: nothing holds it, this process does, or
        the platform has no flock."""
        if self._lock is not None:
            return None
        try:
            import fcntl
        except ImportError:
            return None
        try:
            fd = os.open(self.path / ".lock", os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # never trained here, or unreadable: nothing to say
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in _LOCK_BUSY:
                    return None
                holder = os.read(fd, 32).decode(errors="replace").strip()
                return int(holder) if holder.isdigit() else 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def _remove_torn_writes(self) -> None:
        """Delete the temp files of atomic writes a killed process left (`.NAME.xxxx.tmp`
        beside a checkpoint or report): with the lock held, no write of this run is under
        way, and the files they were for are whole (the rename never happened)."""
        for folder in (self.path, self.checkpoints, self.media):
            if not folder.is_dir() or folder.is_symlink():
                continue
            for entry in folder.glob(".*.tmp"):
                if entry.is_file() and not entry.is_symlink():
                    entry.unlink(missing_ok=True)

    @staticmethod
    def _close_locks_in_child() -> None:
        """After a fork (AsyncVectorEnv's workers, multiprocessing): the child's copies of
        held lock descriptors close, or the lock would live as long as the child does."""
        for fd in list(_HELD_LOCKS):
            try:
                os.close(fd)
            except OSError:
                pass
        _HELD_LOCKS.clear()

    def release(self) -> None:
        """Give the lock taken by `hold` back."""
        if self._lock is not None:
            _HELD_LOCKS.discard(self._lock)
            os.close(self._lock)
            self._lock = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config(self) -> dict[str, Any]:
        """config.yaml as a dict, a fresh copy at each call, parsed once while the file is
        unchanged (a report reads it a dozen times). RunError when it is larger than
        MAX_YAML_CHARS bytes (not read), not YAML, past safe_yaml's bounds or not a mapping."""
        path = self.path / "config.yaml"
        stat = path.stat()
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._config is None or self._config[0] != key:
            self._config = (key, self._read_config(path))
        return copy.deepcopy(self._config[1])

    @staticmethod
    def _read_config(path: Path) -> dict[str, Any]:
        try:
            data = safe_yaml(read_text_capped(path, MAX_YAML_CHARS, "config"))
        except TooLarge as err:
            raise RunError(f"{err}: payoff writes a few KB there") from None
        except YAMLTooLarge as err:
            raise RunError(f"{str(path)!r} is too large to read: {err}") from None
        except (yaml.YAMLError, RecursionError, UnicodeDecodeError) as err:
            raise RunError(
                f"{str(path)!r} is not valid YAML ({type(err).__name__}: {str(err)[:200]})"
            ) from None
        if not isinstance(data, dict):
            raise RunError(f"{str(path)!r} is not a mapping")
        return data

    # ---- metrics ----------------------------------------------------------------------
    def log(self, step: int, **metrics: Any) -> None:
        """Append one metrics record; its numbers also go to the run's loggers."""
        record = {"step": int(step), "time": round(self.elapsed(), 3)}
        record.update({k: _jsonable(v) for k, v in metrics.items()})
        self._write_record(record)
        scalars = {
            key: value
            for key, value in record.items()
            if key not in ("step", "time")
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        }
        if scalars:
            self._loggers.log(int(step), scalars)

    def event(
        self, step: int, kind: str, message: str, severity: str = "warning", **evidence: Any
    ) -> None:
        """Record a notable event (a monitor alarm, a skipped bad sample) in metrics.jsonl."""
        payload = {"kind": kind, "message": message, "severity": severity, "evidence": evidence}
        self._write_record({"step": int(step), "time": round(self.elapsed(), 3), "event": payload})

    def append_jsonl(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Append rows to a JSON-lines file of the run (e.g. samples.jsonl: completions with
        their rewards, which the report shows)."""
        path = self.path / name
        with writing_to(path), open(path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(_jsonable(row)) + "\n")

    def _write_record(self, record: dict[str, Any]) -> None:
        path = self.path / "metrics.jsonl"
        with writing_to(path):
            if self._metrics_file is None:
                self._metrics_file = open(path, "a", buffering=1)  # noqa: SIM115
            self._metrics_file.write(json.dumps(record) + "\n")

    def flush(self) -> None:
        if self._metrics_file is not None:
            with writing_to(self.path / "metrics.jsonl"):
                self._metrics_file.flush()
                os.fsync(self._metrics_file.fileno())
        self._loggers.flush()

    def close(self) -> None:
        self.flush()
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None
        self._loggers.close()

    def elapsed(self) -> float:
        return self._time_offset + time.time() - self._start

    def records(self) -> list[dict[str, Any]]:
        """All metric records (not events) in order."""
        return [r for r in read_jsonl(self.path / "metrics.jsonl") if "event" not in r]

    def events(self) -> list[dict[str, Any]]:
        """The event records in order. A line whose event is not an object, or that has no
        numeric step, is skipped like an unreadable one (a hand-edited or foreign file), and
        evidence that is not an object is left out of its event."""
        events = []
        for record in read_jsonl(self.path / "metrics.jsonl"):
            event, step = record.get("event"), record.get("step")
            if not isinstance(event, dict) or isinstance(step, bool):
                continue
            if not isinstance(step, int | float) or not math.isfinite(step):
                continue
            if "evidence" in event and not isinstance(event["evidence"], dict):
                record = {**record, "event": {k: v for k, v in event.items() if k != "evidence"}}
            events.append(record)
        return events

    def truncate_metrics(self, step: int, elapsed: float) -> None:
        """Drop the records logged after the checkpoint we resume from: those past its
        `step`, and those at its step written after it (`elapsed`, the run's time when it
        was saved), such as a final evaluation an interrupt cut short, which the resumed
        run logs again."""
        self.close()
        path = self.path / "metrics.jsonl"

        def after_checkpoint(record: dict[str, Any]) -> bool:
            at, time_ = record.get("step", 0), record.get("time")
            if at != step:
                return at > step
            # times are kept to the millisecond: half of one is rounding, not order
            return isinstance(time_, int | float) and time_ > elapsed + 0.0005

        kept = [r for r in read_jsonl(path) if not after_checkpoint(r)]
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
        self._time_offset = elapsed
        self._start = time.time()

    # ---- summary ----------------------------------------------------------------------
    def write_summary(self, **values: Any) -> None:
        """Merge `values` into summary.json (final evaluation, headline numbers); a
        summary.json that is not a JSON object is replaced, with a warning."""
        try:
            summary = self.summary()
        except RunError as err:
            warnings.warn(f"{err}; writing a new one", RuntimeWarning, stacklevel=2)
            summary = {}
        summary.update(values)
        self._write_summary(summary)

    def drop_summary_keys(self, *keys: str) -> None:
        """Remove `keys` from summary.json (a run trained further is unfinished again)."""
        if (self.path / "summary.json").exists():
            self._write_summary({k: v for k, v in self.summary().items() if k not in keys})

    def _write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_text(
            self.path / "summary.json", json.dumps(summary, indent=2, default=_jsonable)
        )

    def write_config(self, config: dict[str, Any]) -> None:
        """Write config.yaml (at creation; its length again when a run is trained further)."""
        atomic_write_text(self.path / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    def summary(self) -> dict[str, Any]:
        """summary.json as a dict ({} before it exists); RunError when it is not a JSON object
        or is past MAX_SUMMARY_BYTES or MAX_SUMMARY_VALUES (not parsed then)."""
        path = self.path / "summary.json"
        if not path.is_file():
            return {}
        made_elsewhere = "payoff writes far smaller ones: it was made or changed elsewhere"
        try:
            text = read_text_capped(path, MAX_SUMMARY_BYTES, "summary")
        except TooLarge as err:
            raise RunError(f"{err}; {made_elsewhere}") from None
        except UnicodeDecodeError as err:
            raise RunError(f"{str(path)!r} is not valid JSON ({err})") from None
        try:
            check_json_shape(text, MAX_SUMMARY_BYTES, MAX_SUMMARY_VALUES, 1000)
        except TooLarge as err:
            raise RunError(f"{str(path)!r} has {err}; {made_elsewhere}") from None
        try:
            summary = json.loads(text)
        except (ValueError, RecursionError) as err:  # bad JSON or UTF-8, deep, huge numbers
            raise RunError(f"{str(path)!r} is not valid JSON ({str(err)[:200]})") from None
        if not isinstance(summary, dict):
            raise RunError(f"{str(path)!r} holds a {type(summary).__name__}, not a JSON object")
        return summary

    # ---- checkpoints ------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any], algo: str, name: str = "latest") -> Path:
        """Write checkpoints/<name>.safetensors atomically; `state` must hold everything to
        resume, as data (see payoff.track.checkpoint)."""
        payload = {
            "format": CHECKPOINT_FORMAT,
            "algo": algo,
            "elapsed": self.elapsed(),
            "state": state,
        }
        return save_state(self.checkpoints / f"{name}{CHECKPOINT_SUFFIX}", payload)

    def checkpoint_path(self, name: str = "latest") -> Path:
        """checkpoints/<name>.safetensors; a run from payoff 0.1 may only have <name>.pt,
        which is returned then so that loading it says what it is."""
        path = self.checkpoints / f"{name}{CHECKPOINT_SUFFIX}"
        legacy = self.checkpoints / f"{name}{LEGACY_SUFFIX}"
        return legacy if not path.exists() and legacy.exists() else path

    def load_checkpoint(self, algo: str, name: str = "latest") -> tuple[dict[str, Any], float]:
        """Read a checkpoint written by `algo`; returns (state, elapsed seconds at save)."""
        return load_checkpoint_file(self.checkpoint_path(name), algo)


class OtherAlgorithmError(CheckpointError):
    """A checkpoint of another algorithm than the one loading it (`found`: the file's)."""

    def __init__(self, message: str, found: str):
        super().__init__(message)
        self.found = found


def load_checkpoint_file(path: str | Path, algo: str | None) -> tuple[dict[str, Any], float]:
    """Load and check a checkpoint file (a run's, or one written by `Algorithm.save`).

    Clear errors for missing, corrupt, pickle-based or foreign files; never unpickles.
    """
    path = Path(path)
    if not path.is_file():
        in_a_run = path.parent.name == "checkpoints"
        raise CheckpointError(
            f"no checkpoint at {str(path)!r}; the run may have stopped before its first checkpoint"
            if in_a_run
            else f"no file {str(path)!r} to load: give a file written by save(), a run "
            f"directory or its checkpoints/latest.safetensors"
        )
    payload = load_state(path, "checkpoint")
    if not isinstance(payload, dict) or not isinstance(payload.get("algo"), str):
        raise CheckpointError(
            f"checkpoint {str(path)!r} is not a payoff checkpoint (it names no algorithm)"
        )
    if not isinstance(payload.get("state"), dict):
        raise CheckpointError(f"checkpoint {str(path)!r} holds no state (its 'state' is missing)")
    if algo is not None and payload["algo"] != algo:
        raise OtherAlgorithmError(
            f"checkpoint {str(path)!r} was written by algorithm {payload['algo']!r}, but this run uses {algo!r}",
            payload["algo"],
        )
    elapsed = payload.get("elapsed", 0.0)
    if not isinstance(elapsed, int | float) or isinstance(elapsed, bool):
        raise CheckpointError(f"checkpoint {str(path)!r} has a non-numeric 'elapsed'")
    return payload["state"], float(elapsed)


_LOCK_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)  # flock: another holds it


def _flock_soon(fd: int, kind: int, patience: float = 0.5) -> None:
    """flock(fd, kind) without blocking, tried again for up to `patience` seconds: another
    process probing the lock (`Run.trainer_pid`, a report) holds it for a moment only, while
    a trainer holds it for as long as it trains. Raises the last OSError."""
    import fcntl

    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except OSError as err:
            busy = err.errno in _LOCK_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file of records (JSON objects), ignoring a torn last line (a run
    killed mid-write) and any line that is not an object."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    with open(path, "rb") as handle:
        for raw in _lines(handle, MAX_RECORD_BYTES):
            # bytes that are not UTF-8 (a foreign or damaged file) spoil their line only
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # bad JSON, deep nesting, huge ints
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


MAX_SUMMARY_BYTES = 16 * 2**20
"""summary.json above this is not read (payoff writes a few KB; an agent's or language
model's, with its evaluation examples, tens of KB); a 300 MB one peaked at 1.6 GB."""
MAX_SUMMARY_VALUES = 4_000_000  # values in it (see check_json_shape), checked before parsing

MAX_RECORD_BYTES = 16 * 2**20
"""A line of a run's JSON-lines files longer than this is skipped unread: payoff writes
records of a few hundred bytes (samples: a few completions), and one 100 MB line in a
foreign or damaged file made `payoff report` peak at 0.9 GB."""


def _lines(handle: Any, limit: int) -> Iterator[bytes]:
    """The lines of a binary file, each read whole, except those longer than `limit` bytes,
    which are passed over in chunks without being kept."""
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):  # the rest of an over-long line
            line = handle.readline(limit)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=Run._close_locks_in_child)
