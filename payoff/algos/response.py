"""What a run does when a monitor raises an alarm: `on_alarm: warn | halt | rollback`.

    warn      (default) the alarm is an event in metrics.jsonl and a line on the console;
              training goes on. An honest run is never stopped by a default.
    halt      training stops after the step that raised it; the final evaluation and the
              summary are written as for a finished run, with the alarm as the reason.
    rollback  the learned state (networks, optimizers, schedulers) goes back to the newest
              snapshot taken before the alarm's onset, the samples the alarm flagged are
              quarantined (they never enter the loss again), the monitors restart from the
              records up to that snapshot, and training goes on from the current step with
              fresh random draws. After `rollback.max` rollbacks, the next alarm halts.

Snapshots are kept in memory every `rollback.every` steps: the first one and the `keep`
latest. Counters, random streams and the step count are not rolled back, so the run's
curves stay ordered in time and the events say what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from payoff.core.config import in_range
from payoff.core.state import restore, state_of
from payoff.monitor.detectors import Alarm, replay
from payoff.track.progress import say

RESPONSES = ("warn", "halt", "rollback")


@dataclass
class RollbackConfig:
    """How `on_alarm: rollback` keeps its history.

    every: steps between snapshots (in the algorithm's unit; 0 = at every log record).
    keep: latest snapshots kept besides the first.
    max: rollbacks before an alarm halts the run instead.
    """

    every: int = field(default=10, metadata=in_range(0))
    keep: int = field(default=3, metadata=in_range(0))
    max: int = field(default=2, metadata=in_range(0))


def learned(value: Any) -> bool:
    """Whether an attribute is learned state a rollback puts back (not a counter or RNG)."""
    if isinstance(value, list | tuple) and value:
        return all(learned(v) for v in value)
    return isinstance(
        value,
        torch.nn.Module | torch.optim.Optimizer | torch.optim.lr_scheduler.LRScheduler,
    )


class Responder:
    """Carries out `on_alarm` for one algorithm (see the module doc)."""

    def __init__(self, algorithm: Any):
        self.algorithm = algorithm
        self.snapshots: list[tuple[int, dict[str, Any]]] = []
        self.rollbacks = 0
        self.warned = False
        self.last_snapshot_step: int | None = None

    @property
    def mode(self) -> str:
        return str(getattr(self.algorithm.config, "on_alarm", "warn"))

    @property
    def rollback(self) -> RollbackConfig:
        return getattr(self.algorithm.config, "rollback", None) or RollbackConfig()

    def snapshot_due(self, step: int) -> None:
        """Keep a snapshot of the learned state when one is due (rollback mode only)."""
        if self.mode != "rollback":
            return
        every = self.rollback.every
        last = self.last_snapshot_step
        if last is not None and (step - last < every if every else step == last):
            return
        algorithm = self.algorithm
        names = [n for n in algorithm.saved if learned(getattr(algorithm, n, None))]
        self.snapshots.append((step, {n: state_of(getattr(algorithm, n)) for n in names}))
        self.last_snapshot_step = step
        if len(self.snapshots) > self.rollback.keep + 1:  # the first, and the latest `keep`
            del self.snapshots[1]

    def respond(self, alarm: Alarm) -> None:
        algorithm, run = self.algorithm, self.algorithm.run
        if alarm.severity == "info":
            return
        mode = self.mode
        if mode == "rollback" and self.rollbacks >= self.rollback.max:
            mode = "halt"
        if mode == "warn":
            if not self.warned:
                say(
                    f"alarm at step {alarm.step}: {alarm.message} (on_alarm: warn, so training "
                    f"goes on; later alarms are in the run's events)"
                )
                self.warned = True
            return
        if mode == "halt":
            algorithm.halted = alarm
            message = f"halted by the {alarm.kind} alarm at step {alarm.step}"
            say(f"{message}: {alarm.message}")
            if run is not None:
                run.event(alarm.step, "halt", message, "critical", alarm=alarm.kind)
                run.write_summary(halted={"step": alarm.step, "alarm": alarm.kind})
            return
        self._roll_back(alarm)

    def _roll_back(self, alarm: Alarm) -> None:
        algorithm, run = self.algorithm, self.algorithm.run
        onset = int(alarm.evidence.get("since_step", alarm.step))
        before = [s for s in self.snapshots if s[0] < onset] or self.snapshots[:1]
        if not before:  # nothing kept yet: the alarm came before the first snapshot
            algorithm.halted = alarm
            return
        step, saved = before[-1]
        for name, state in saved.items():  # in place, as a checkpoint is loaded
            setattr(algorithm, name, restore(getattr(algorithm, name), state, name))
        self.snapshots = [s for s in self.snapshots if s[0] <= step]
        self.last_snapshot_step = step
        self.rollbacks += 1
        flagged = algorithm.quarantine(alarm)
        algorithm.after_rollback()
        for monitor in algorithm.monitors:  # fresh state, fed the records up to the snapshot
            monitor.fired = False
            monitor.setup()
        replay(algorithm.monitors, [r for r in algorithm.history if int(r["step"]) <= step])
        message = (
            f"rolled back to the snapshot of step {step} (alarm {alarm.kind} at step "
            f"{alarm.step}, onset {onset}); {flagged} flagged samples quarantined"
        )
        say(message)
        if run is not None:
            run.event(
                alarm.step,
                "rollback",
                message,
                "warning",
                to_step=step,
                alarm=alarm.kind,
                quarantined=flagged,
                rollbacks=self.rollbacks,
            )
