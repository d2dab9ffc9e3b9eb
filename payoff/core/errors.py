"""One exception hierarchy whose messages say what was wrong and what would be valid."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PayoffError(Exception):
    """Base class of every error payoff raises on purpose; the CLI prints it as one line."""


class ConfigError(PayoffError):
    """A recipe, config key or value is wrong."""


class EnvError(PayoffError):
    """An environment id is unknown or an env does not fit the algorithm."""


class CheckpointError(PayoffError):
    """A checkpoint is missing, corrupt, or belongs to a different algorithm or env."""


class RunError(PayoffError):
    """A run directory is missing, not writable, or not a payoff run."""


class DataError(PayoffError):
    """A dataset file or row is malformed."""


def suggest(name: str, valid: Iterable[str], n: int = 3) -> str:
    """A ' Did you mean ...?' hint for `name` among `valid`, or '' when nothing is close."""
    matches = difflib.get_close_matches(str(name), [str(v) for v in valid], n=n, cutoff=0.5)
    if not matches:
        return ""
    return " Did you mean " + " or ".join(repr(m) for m in matches) + "?"


class TrainingError(PayoffError):
    """Training itself went wrong: the networks diverged (NaN or inf weights or actions)."""
