"""A progress bar for long work: step, episodes, recent return, steps/s and ETA."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from tqdm import tqdm


class Progress:
    """Thin tqdm wrapper; silent when PAYOFF_PROGRESS=0 (tests) or show=False.

    The count never passes `total`: a last rollout that overshoots it (8 envs x 128 steps past
    a total of 20,000) would otherwise make tqdm drop the total, the bar and the ETA.
    """

    def __init__(
        self,
        total: int,
        initial: int = 0,
        desc: str = "train",
        unit: str = "step",
        show: bool = True,
    ):
        """show: False hides the bar (learn(progress_bar=False))."""
        enabled = show and os.environ.get("PAYOFF_PROGRESS", "1") != "0"
        self._bar = tqdm(
            total=total,
            initial=min(initial, total),
            desc=desc,
            unit=unit,
            unit_scale=True,
            dynamic_ncols=True,
            mininterval=0.5 if sys.stderr.isatty() else 5.0,
            disable=not enabled,
            file=sys.stderr,
        )
        self._last_postfix = 0.0

    def update(self, n: int, **postfix: Any) -> None:
        """Advance by `n` (clamped to what is left of the total), maybe refreshing the postfix."""
        self._bar.update(max(0, min(n, self._bar.total - self._bar.n)))
        now = time.time()
        if postfix and now - self._last_postfix > 0.5:
            self._last_postfix = now
            self._bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)

    @property
    def visible(self) -> bool:
        """Whether the bar is drawn at all (not off by PAYOFF_PROGRESS=0 or a pipe)."""
        return not self._bar.disable

    def postfix_due(self) -> bool:
        """Whether a new postfix would be shown now (at most every 0.5 s); cheap to ask."""
        return not self._bar.disable and time.time() - self._last_postfix > 0.5

    def set_postfix(self, postfix: dict[str, Any]) -> None:
        self._last_postfix = time.time()
        if postfix:
            self._bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)

    def close(self) -> None:
        self._bar.close()


def say(text: str) -> None:
    """Print `text` on stderr on lines of its own: a progress bar being drawn there is
    cleared first and drawn again below it (a plain print would land on the bar's line)."""
    tqdm.write(text, file=sys.stderr)


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.3g}"
    return value


class LateProgress:
    """A bar that appears only once work has run `after` seconds: evaluation is usually a
    blink, but an env without a time limit, or a planner at a second a step, can make it
    minutes, and a silent minute looks hung. `tick(steps)` is cheap: it looks at the clock
    once every `every` calls (256 by default).

    It counts finished episodes, unless `episode_steps` (the episodes' time limit) is
    given: then it counts env steps out of total * episode_steps, an episode that ends
    early counting its unused steps as done, so a batch of episodes that all end at the
    limit together moves the bar all along (the episodes done are in the postfix)."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "episode",
        after: float = 10.0,
        episode_steps: int | None = None,
        every: int = 256,
        show: bool = True,
    ):
        """every: how many calls of `tick` between looks at the clock (1 for work that ticks
        once per batch of seconds, such as a model's pass over a dataset). show: False never
        draws it (learn(progress_bar=False))."""
        self.episode_steps, self.every, self.show = episode_steps, every, show
        if episode_steps:
            total, unit = total * episode_steps, "step"
        self.total, self.desc, self.unit, self.after = total, desc, unit, after
        self.started = time.monotonic()
        self.done = 0  # episodes finished
        self.steps = 0
        self.count = 0  # what the bar counts: episodes, or steps taken and steps left unused
        self._calls = 0
        self._bar: Progress | None = None

    def tick(self, steps: int = 1, finished: int = 0, unused: int = 0) -> None:
        """`steps` env steps taken and `finished` more episodes ended since the last call,
        `unused` steps of their time limits left over (counted only with episode_steps)."""
        self.steps += steps
        self.done += finished
        counted = steps + unused if self.episode_steps else finished
        self.count += counted
        if self._bar is not None:
            self._bar.update(counted, **self._postfix())
            return
        self._calls += 1
        if not self.show:
            return
        if self._calls % self.every == 0 and time.monotonic() - self.started > self.after:
            self._bar = Progress(self.total, initial=self.count, desc=self.desc, unit=self.unit)
            self._bar.set_postfix(self._postfix())

    def close(self) -> None:
        if self._bar is not None:  # its last word: the final counts, not the last shown
            self._bar.set_postfix(self._postfix())
            self._bar.close()

    def _postfix(self) -> dict[str, int]:
        """What the bar does not count: episodes done when it counts steps, else steps."""
        if self.episode_steps:
            return {"episodes": self.done}
        return {"steps": self.steps} if self.steps else {}
