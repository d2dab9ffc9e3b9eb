"""Importing what a config names by 'module:name' (a user's env class, wrapper or reward
function), with the working folder importable and one clear error for anything missing.

Code named by a file is refused unless trusted. A config that payoff reads back from disk
(a run's checkpoint, a file `save` wrote) may come from anyone: `env.entry_point:
shutil:rmtree` with `kwargs: {path: ~}` would delete a home folder on `payoff eval`, and a
reward `evil.py:fn` next to the run would run on load. So while a loader rebuilds an
algorithm from such a config (`names_from(source)`), every import a config names raises
a ConfigError instead, unless the source is trusted: payoff wrote it on this machine for
this user (`payoff.core.cache.written_here`), or the user said so (`--trust-code`,
`trust_code=True`). Configs a user writes (recipes, overrides, Python arguments) are the
user's own and import freely.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from payoff.core.errors import CheckpointError, ConfigError, PayoffError, suggest

_UNTRUSTED_SOURCE: ContextVar[str | None] = ContextVar("payoff_untrusted_source", default=None)
_ALLOWED: ContextVar[frozenset[str]] = ContextVar("payoff_allowed_code", default=frozenset())
_TRUST_ALL: ContextVar[bool] = ContextVar("payoff_trust_all_code", default=False)
_WEIGHTS_BUDGET: ContextVar[tuple[str, int] | None] = ContextVar(
    "payoff_weights_budget", default=None
)


@contextmanager
def trusting_loaded_code() -> Iterator[None]:
    """While active, the code any loaded file names is trusted (`--trust-code`)."""
    token = _TRUST_ALL.set(True)
    try:
        yield
    finally:
        _TRUST_ALL.reset(token)


@contextmanager
def names_from(source: str | None, allowed: frozenset[str] = frozenset()) -> Iterator[None]:
    """While active, the config being rebuilt came from `source` (a file named in errors)
    and names no code that may run, except the `allowed` specs (what the caller passed in
    place of the file's, e.g. its own env); None (a trusted source) changes nothing."""
    token = _UNTRUSTED_SOURCE.set(None if _TRUST_ALL.get() else source)
    allowed_token = _ALLOWED.set(allowed)
    try:
        yield
    finally:
        _UNTRUSTED_SOURCE.reset(token)
        _ALLOWED.reset(allowed_token)


@contextmanager
def weights_from(source: str | None, values: int) -> Iterator[None]:
    """While active, the networks being built for a file from `source` may declare at most
    the `values` (tensor and array elements) the file holds: its weights must fill them.
    A 728-byte policy file declaring hidden sizes of 12,000 made 3.6 GB of layers before
    the load found no weights for them. None (a trusted source) sets no bound."""
    token = _WEIGHTS_BUDGET.set(None if source is None else (source, int(values)))
    try:
        yield
    finally:
        _WEIGHTS_BUDGET.reset(token)


def check_weights(count: int, what: str) -> None:
    """CheckpointError, before anything is allocated, when a network of `count` weights is
    built for a loaded file that holds fewer values (see `weights_from`)."""
    budget = _WEIGHTS_BUDGET.get()
    if budget is not None and count > budget[1]:
        source, values = budget
        raise CheckpointError(
            f"{source} declares {what} of {count:,} weights, but the file holds {values:,} "
            f"values in all: its config does not match its weights (a corrupt or crafted file)"
        )


def refuse_untrusted(key: str, value: str, what: str = "code to import and run") -> None:
    """ConfigError when a config from an untrusted file names code (`key` = `value`), or
    whatever else `what` says it names (a file to write)."""
    source = _UNTRUSTED_SOURCE.get()
    if source is None or value in _ALLOWED.get():
        return
    raise ConfigError(
        f"{source} names {what} ({key} {value!r}). A run or file loaded from "
        f"disk may come from anyone, so payoff runs no code it names unless you trust it: "
        f"add --trust-code to the command, or pass trust_code=True to load (or pass the env "
        f"yourself: Algo.load(path, env=...)). Runs and files payoff wrote on this machine "
        f"for you are trusted already"
    )


def import_module(
    module_name: str, key: str, value: str, error: type[PayoffError] = ConfigError
) -> Any:
    """Import a user module named by the config `key`'s `value`. The working folder counts as
    importable: the `payoff` command's own folder is what Python puts on sys.path, not the
    user's. Failures are one `error` naming the key and the value; a config from an
    untrusted file is refused (module docstring)."""
    refuse_untrusted(key, value)
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        missing_here = (
            isinstance(err, ModuleNotFoundError)
            and err.name == module_name.split(".")[0]
            and os.getcwd() not in sys.path
        )
        if not missing_here:
            raise error(f"{key} {value!r}: importing {module_name!r} failed: {err}") from None
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise error(
            f"{key} {value!r}: no module named {err.name!r} (looked in the Python path and the "
            f"working folder {os.getcwd()}); run from the folder that holds it or install it"
        ) from None
    except ImportError as err:
        raise error(f"{key} {value!r}: importing {module_name!r} failed: {err}") from None


def import_object(spec: str, key: str, error: type[PayoffError] = ConfigError) -> Any:
    """'module:name' (name may be dotted) -> the object, importing the module as
    `import_module` does. A malformed spec or a missing name is one `error`."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise error(f"{key} {spec!r} must look like 'module:Name' (e.g. my_envs:GridEnv)")
    module = import_module(module_name, key, spec, error)
    found: Any = module
    for part in name.split("."):
        if not hasattr(found, part):
            public = [n for n in dir(module) if not n.startswith("_")]
            raise error(
                f"{key} {spec!r}: module {module_name!r} has no {name!r}.{suggest(part, public)}"
            )
        found = getattr(found, part)
    return found
