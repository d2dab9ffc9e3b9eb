"""Files in and out: atomic writes (a temporary file next to the target, renamed into place),
and bounded reads of files that may come from anyone (a copied run, a downloaded model):
text read only below a size cap, JSON whose shape is checked before it is parsed, and YAML
parsed once, by libyaml where present, within bounds on its length and values."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml


def atomic_write(
    path: str | Path, write: Callable[[IO[Any]], object], binary: bool = False
) -> None:
    """Call `write(file)` on a temp file in the target's folder, then atomically rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with writing_to(path), os.fdopen(fd, "wb" if binary else "w") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; runs are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@contextmanager
def writing_to(path: str | Path) -> Iterator[None]:
    """Give an OSError that names no file (a full disk, a quota: "No space left on device")
    `path` as its file name, so that its one-line message says which file was being written."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise type(err)(err.errno, err.strerror or str(err), str(path)) from err


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that readers see either the old file or the whole new one."""
    atomic_write(path, lambda f: f.write(text))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    atomic_write(path, lambda f: f.write(data), binary=True)


# ---- reading files that may come from anyone ------------------------------------------
class TooLarge(ValueError):
    """A file or text past the size payoff reads (the message says which and by how much)."""


def read_text_capped(path: str | Path, limit: int, what: str, errors: str = "strict") -> str:
    """The UTF-8 text of `path`, or TooLarge when the file holds more than `limit` bytes:
    checked before reading, so a 300 MB file costs nothing. `what` names the file in the
    message ("summary"); `errors` is bytes.decode's (UnicodeDecodeError for "strict")."""
    path = Path(path)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(limit + 1)  # (a file growing as it is read is cut here too)
    if size > limit or len(data) > limit:
        raise TooLarge(
            f"{what} {str(path)!r} is {max(size, len(data)):,} bytes, more than the "
            f"{limit:,} payoff reads"
        )
    return data.decode("utf-8", errors=errors)


def read_prefix(path: str | Path, limit: int) -> tuple[str, bool]:
    """The first `limit` bytes of `path` as text, and whether the file goes on past them."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    cut = len(data) > limit
    return data[:limit].decode("utf-8", errors="ignore" if cut else "replace"), cut


def check_json_shape(text: str, max_chars: int, max_values: int, max_depth: int) -> None:
    """TooLarge when the JSON `text` is longer than `max_chars`, holds more than
    `max_values` values (lists and objects, and the items after a comma in them), or nests
    lists and objects deeper than `max_depth`. Checked on the text, in C-speed passes,
    before json.loads, which spends ~90 bytes per `[]` it builds (60 MB of `[],` peaked at
    3.2 GB). Brackets and commas inside strings are not counted."""
    if len(text) > max_chars:
        raise TooLarge(f"{len(text):,} characters, more than the {max_chars:,} payoff reads")
    containers = text.count("[") + text.count("{")
    if containers <= max_depth and containers + text.count(",") <= max_values:
        return  # (the common case: too few to matter, those in strings included)
    raw = text.encode("utf-8", errors="replace")  # (bytes of non-ASCII are never brackets)
    if b'"' in raw:
        raw = _JSON_STRING.sub(b"", raw)
    opening, closing = raw.count(b"[") + raw.count(b"{"), raw.count(b"]") + raw.count(b"}")
    values = max(opening, closing) + raw.count(b",")
    if values > max_values:
        raise TooLarge(
            f"{values:,} values (lists, objects and their items), more than the "
            f"{max_values:,} payoff reads"
        )
    import numpy as np

    codes = np.frombuffer(raw.translate(_BRACKET_STEP), dtype=np.uint8)
    steps = codes[codes != 1].astype(np.int32) - 1  # [+1 opens, -1 closes] in order
    if steps.size and int(np.cumsum(steps).max()) > max_depth:
        raise TooLarge(f"lists and objects nested deeper than {max_depth}")


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# every byte becomes 1 (no step) except brackets: opening 2 (+1), closing 0 (-1)
_BRACKET_STEP = bytes(2 if byte in b"[{" else 0 if byte in b"]}" else 1 for byte in range(256))


# ---- YAML ---------------------------------------------------------------------------------
MAX_YAML_CHARS = 2**20
"""The longest YAML text payoff parses: configs are a few KB (a run's config.yaml ~2 KB), and
a 60 MB string in a copied run's config.yaml held `payoff report` for minutes."""
MAX_YAML_NODES = 100_000
"""The most values (scalars, lists, mappings) a YAML text may write out; a config has a few
hundred. Counted as the parser meets them, so a 1 MB flow list stops within milliseconds."""
MAX_YAML_VALUES = 1_000_000
"""The most values a YAML document may stand for, counting each use of an alias in full."""


class YAMLTooLarge(yaml.YAMLError):
    """YAML past payoff's bounds: too long, too many values, or an alias bomb."""


_MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml's parser (C) where PyYAML was built with it: the pure-Python one is far slower on
# large strings. Both construct plain data only (SafeConstructor).
_SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CountingLoader(_SafeLoader):  # type: ignore[misc,valid-type]
    """A safe loader that stops at the MAX_YAML_NODES-th value it resolves (both parsers call
    `resolve` for every value without an explicit tag, as they compose the document)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.values = 0

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        self.values += 1
        if self.values > MAX_YAML_NODES:
            raise YAMLTooLarge(f"it holds more than {MAX_YAML_NODES:,} values")
        return super().resolve(kind, value, implicit)


def safe_yaml(text: str) -> Any:
    """yaml.safe_load (data only, never objects) within bounds, else YAMLTooLarge: at most
    MAX_YAML_CHARS characters, MAX_YAML_NODES values written out, MAX_YAML_VALUES values
    once aliases are expanded. Aliases share one object, so loading nine levels of ten
    aliases each takes 578 bytes and no time, but anything that walks or copies the result
    (the config checks, a report page) meets a billion values. A key given twice in one
    mapping is a ConstructorError."""
    if len(text) > MAX_YAML_CHARS:
        raise YAMLTooLarge(
            f"it is {len(text):,} characters long, more than the {MAX_YAML_CHARS:,} payoff "
            f"reads (configs are a few thousand)"
        )
    loader = _CountingLoader(text)
    try:
        root = loader.get_single_node()  # the document's nodes, parsed once
        shared = _refuse_repeated_keys(root)
        data = None if root is None else loader.construct_document(root)
    finally:
        loader.dispose()
    if not shared:
        return data  # no alias: as many values as nodes, already counted
    stack, count = [data], 0
    while stack:  # each node as often as it is used: what a walk of the result would see
        node = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            raise YAMLTooLarge(
                f"its aliases (*name) expand to more than {MAX_YAML_VALUES:,} values: an "
                f"alias repeated inside another alias's value, many levels deep"
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return data


def _refuse_repeated_keys(root: yaml.Node | None) -> bool:
    """A ConstructorError for a key given twice in one mapping of a composed document (YAML
    keeps the last in silence: `steps: 2000` then `steps: 3000` trained 3000). Merge keys
    (<<) may still be overridden, as YAML means them to be. Nodes an alias shares are
    walked once. Returns whether any node is shared (the document uses aliases)."""
    stack, walked, shared = [root], set(), False
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if id(node) in walked:
            shared = True
            continue
        walked.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            stack += [key, value]
            if key.tag == _MERGE_TAG or not isinstance(key, yaml.ScalarNode):
                continue
            line = key.start_mark.line + 1
            first = lines.setdefault((key.tag, key.value), line)
            if first != line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key.value!r} is given twice (lines {first} and {line}); YAML "
                    f"would keep the last in silence: keep one",
                    key.start_mark,
                )
    return shared
