"""A progress bar for long work: step, episodes, recent return, steps/s and ETA."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from tqdm import tqdm


class Progress:
    """Thin tqdm wrapper; silent when PAYOFF_PROGRESS=0 (tests).

    The count never passes `total`: a last rollout that overshoots it (8 envs x 128 steps past
    a total of 20,000) would otherwise make tqdm drop the total, the bar and the ETA.
    """

    def __init__(self, total: int, initial: int = 0, desc: str = "train", unit: str = "step"):
        enabled = os.environ.get("PAYOFF_PROGRESS", "1") != "0"
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

    def postfix_due(self) -> bool:
        """Whether a new postfix would be shown now (at most every 0.5 s); cheap to ask."""
        return not self._bar.disable and time.time() - self._last_postfix > 0.5

    def set_postfix(self, postfix: dict[str, Any]) -> None:
        self._last_postfix = time.time()
        if postfix:
            self._bar.set_postfix({k: _fmt(v) for k, v in postfix.items()}, refresh=False)

    def close(self) -> None:
        self._bar.close()


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.3g}"
    return value
