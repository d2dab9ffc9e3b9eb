"""Importing what a config names by 'module:name' (a user's env class, wrapper or reward
function), with the working folder importable and one clear error for anything missing."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from payoff.core.errors import ConfigError, PayoffError, suggest


def import_module(
    module_name: str, key: str, value: str, error: type[PayoffError] = ConfigError
) -> Any:
    """Import a user module named by the config `key`'s `value`. The working folder counts as
    importable: the `payoff` command's own folder is what Python puts on sys.path, not the
    user's. Failures are one `error` naming the key and the value."""
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
