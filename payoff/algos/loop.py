"""The one training loop: every algorithm is this loop with its own iteration plugged in.

    TrainLoop(algorithm, total, desc="ppo CartPole-v1").run()

Per iteration, in this order:

    algorithm.iterate()                  one unit of learning (collect + update, one batch,
                                         one episode); it advances state.step
    progress bar
    every log_every steps:               algorithm.log_training()
    every eval_every steps (and at the   algorithm.evaluate_now(); it may set
      last step with eval_at_end):       state.solved_at, which stops the loop
    every checkpoint_every steps:        algorithm.checkpoint()
    after a log:                         each callback(algorithm, metrics) of learn(n,
                                         callback=...), with what the iteration logged;
                                         one that returns False stops the loop
    then                                 algorithm.between_iterations() (rollback snapshots;
                                         also once before the first)

"every N steps" means the step counter crossed a multiple of N during the iteration, so an
iteration that advances by 2,048 env steps still logs, evaluates and checkpoints on time.
The loop stops at `total`, when the algorithm says it is solved, when an alarm halted it
(`on_alarm: halt`, payoff.algos.response), when a callback returned False, or on Ctrl-C /
SIGTERM / SIGHUP (GracefulInterrupt: the iteration finishes first; a periodic evaluation
stops at its next step, and is not recorded). Then, unless interrupted, a last
`log_training()` when the run has ended (its planned length, solved, halted or stopped by a
callback) on a step that was not a multiple of log_every (a run shorter than log_every still
has its record), the final evaluation and summary (`algorithm.finish()`: a callback's stop
ends the run as stop_at_return does); a checkpoint always, so a stopped run resumes exactly
where it stopped. A callback that raises: the checkpoint is written, then the error goes on.
An interrupted loop returns False; `Algorithm.learn` then raises `LearnInterrupted`.

The counters every run shares live in `LoopState`, which serializes itself; an algorithm's
checkpoint is the loop state plus its modules, optimizers and RNGs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from payoff.rollout.evaluate import EvaluationStopped, stopped_when
from payoff.track.interrupt import GracefulInterrupt
from payoff.track.progress import Progress


@dataclass
class LoopState:
    """Where a run is: the counters every algorithm keeps, saved with each checkpoint.

    step: progress in the algorithm's unit (env steps, episodes, optimizer steps).
    updates: iterations done (rollout + update, batches, episodes).
    evals: (step, score) of each periodic evaluation.
    solved_at: the step at which a stop condition was met (None: not met).
    recent_returns: the last 100 finished training episodes' returns (RL only).
    train_seconds: time spent in iterations (evaluation, logging and checkpoints excluded).
    """

    step: int = 0
    updates: int = 0
    evals: list[tuple[int, float]] = field(default_factory=list)
    solved_at: int | None = None
    recent_returns: list[float] = field(default_factory=list)
    train_seconds: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "updates": self.updates,
            "evals": [list(e) for e in self.evals],
            "solved_at": self.solved_at,
            "recent_returns": list(self.recent_returns),
            "train_seconds": self.train_seconds,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.updates = int(state["updates"])
        self.evals = [tuple(e) for e in state["evals"]]  # type: ignore[misc]
        self.solved_at = state.get("solved_at")
        self.recent_returns = [float(r) for r in state["recent_returns"]]
        self.train_seconds = float(state.get("train_seconds", 0.0))

    def add_returns(self, returns: list[float], keep: int = 100) -> None:
        self.recent_returns = (self.recent_returns + list(returns))[-keep:]


#: learn(n, callback=...)'s callables: fn(algorithm, metrics); False stops training.
Callback = Callable[[Any, dict[str, Any]], Any]


class LearnInterrupted(KeyboardInterrupt):
    """What `learn()` raises after a stop signal (Ctrl-C, SIGTERM, SIGHUP) ended its loop:
    the checkpoint is written first. A KeyboardInterrupt, so a script that does not catch
    it stops instead of saving a half-trained model as if it were done.

    step: where training stood. resume: how to train on (a sentence)."""

    def __init__(self, message: str, step: int, resume: str = ""):
        super().__init__(message)
        self.step = step
        self.resume = resume


class Loopable(Protocol):
    """What an algorithm supplies to the loop."""

    state: LoopState
    interrupted: bool
    halted: Any

    def iterate(self) -> None: ...
    def log_training(self) -> None: ...
    def evaluate_now(self) -> None: ...
    def checkpoint(self, name: str = "latest") -> None: ...
    def between_iterations(self) -> None: ...
    def finish(self) -> None: ...
    def say_unfed_monitors(self) -> None: ...
    def progress_postfix(self) -> dict[str, Any]: ...


def crossed(before: int, after: int, every: int) -> bool:
    """Whether the counter passed a multiple of `every` going from `before` to `after`."""
    return every > 0 and before // every != after // every


@dataclass
class TrainLoop:
    """Runs `algorithm.iterate()` until `total` steps, a stop, or a signal; see the module doc.

    log_every / eval_every / checkpoint_every: in the algorithm's steps (0 = never).
    eval_at_end: also evaluate after the last iteration (LM trainers report the final
        step's accuracy on the curve).
    eval_at_start: evaluate once before the first iteration of a fresh run (where learning
        starts from).
    planned: the run's planned length, when `total` is a stop short of it (learn(n) on a
        longer run): the last record between two logs is written only at the run's end, so
        learning in several calls logs what one call would.
    callbacks: learn(n, callback=...)'s functions, each called as fn(algorithm, metrics)
        after every iteration that logged (metrics: what it logged, merged, with "step");
        one returning False (not None) stops the loop after that step.
    progress_bar: False hides the bar (as PAYOFF_PROGRESS=0 does).
    """

    algorithm: Loopable
    total: int
    desc: str
    unit: str = "step"
    log_every: int = 1
    eval_every: int = 0
    checkpoint_every: int = 0
    eval_at_end: bool = False
    eval_at_start: bool = False
    planned: int | None = None
    callbacks: Sequence[Callback] = ()
    progress_bar: bool = True
    stopped_by_callback: bool = field(default=False, init=False)

    @classmethod
    def from_config(cls, algorithm: Any, total: int, desc: str, **options: Any) -> TrainLoop:
        """The loop on the intervals the algorithm's config declares under the shared names
        (log_every, eval_every, checkpoint_every; one it lacks keeps the default), and
        learn()'s callbacks and progress_bar (the algorithm's loop_options)."""
        config = algorithm.config
        for key in ("log_every", "eval_every", "checkpoint_every"):
            if hasattr(config, key):
                options.setdefault(key, getattr(config, key))
        # learn()'s callbacks and progress_bar, while it runs (Algorithm.loop_options)
        for key, value in getattr(algorithm, "loop_options", {}).items():
            options.setdefault(key, value)
        return cls(algorithm, total, desc, **options)

    def run(self) -> bool:
        """Train; True when it ran to the end (or was solved), False when a signal stopped it."""
        algorithm, state = self.algorithm, self.algorithm.state
        progress = Progress(
            self.total, initial=state.step, desc=self.desc, unit=self.unit, show=self.progress_bar
        )
        try:
            if self.eval_at_start and state.step == 0 and state.updates == 0 and self.total > 0:
                algorithm.evaluate_now()
            algorithm.between_iterations()
            checkpointed = -1  # the step of this loop's last checkpoint
            logged = state.step  # the step of this loop's last record (none: where it began)
            with GracefulInterrupt() as interrupt, stopped_when(lambda: interrupt.requested):
                while (
                    state.step < self.total
                    and state.solved_at is None
                    and algorithm.halted is None
                    and not self.stopped_by_callback
                    and not interrupt.requested
                ):
                    before, started = state.step, time.perf_counter()
                    records = len(getattr(algorithm, "history", ()))
                    algorithm.iterate()
                    state.updates += 1
                    state.train_seconds += time.perf_counter() - started
                    progress.update(state.step - before)
                    if progress.postfix_due():
                        progress.set_postfix(algorithm.progress_postfix())
                    logs = crossed(before, state.step, self.log_every)
                    if logs:
                        algorithm.log_training()
                        logged = state.step
                    if crossed(before, state.step, self.eval_every) or (
                        self.eval_at_end and state.step >= self.total and self.eval_every > 0
                    ):
                        try:
                            algorithm.evaluate_now()
                        except EvaluationStopped:  # a signal came: the loop ends below,
                            pass  # without this evaluation's record; the checkpoint follows
                    if crossed(before, state.step, self.checkpoint_every):
                        algorithm.checkpoint()
                        checkpointed = state.step
                    if logs and self.callbacks:
                        self.stopped_by_callback = self._call_back(records)
                    algorithm.between_iterations()
        except BaseException:  # the bar's line ends before the error is printed below it
            progress.close()
            raise
        if state.updates and progress.visible:  # its last word: the run's last numbers
            progress.set_postfix(algorithm.progress_postfix())
        progress.close()
        algorithm.interrupted = interrupt.requested
        if not algorithm.interrupted:
            ended = (
                state.step >= max(self.total, self.planned or 0)
                or state.solved_at is not None
                or algorithm.halted is not None
                or self.stopped_by_callback
            )
            if ended and self.log_every > 0 and logged != state.step:  # since the last record
                records = len(getattr(algorithm, "history", ()))
                algorithm.log_training()
                if self.callbacks:  # (the loop has ended: a False changes nothing)
                    self._call_back(records)
            # The final evaluation can be long, and Ctrl-C stops it at once: the training
            # is in a checkpoint first, and a resume runs the evaluation again.
            if checkpointed != state.step:
                algorithm.checkpoint()
            try:
                algorithm.finish()
            except KeyboardInterrupt:
                algorithm.interrupted = True
                return False
            algorithm.say_unfed_monitors()  # (a stopped run may yet log what a monitor reads)
        algorithm.checkpoint()
        return not algorithm.interrupted

    def _call_back(self, records: int) -> bool:
        """Call each callback with what this iteration logged (history's records from
        `records` on, merged); True when one returned False. One that raises: the
        checkpoint is written, then the error goes on."""
        algorithm = self.algorithm
        metrics: dict[str, Any] = {"step": algorithm.state.step}
        for record in getattr(algorithm, "history", [])[records:]:
            metrics.update(record)
        stop = False
        try:
            for callback in self.callbacks:
                if callback(algorithm, dict(metrics)) is False:
                    stop = True
        except BaseException:
            algorithm.checkpoint()
            raise
        return stop
