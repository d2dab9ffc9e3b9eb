"""Checkpoints as data: a tree of plain values in one safetensors file, never a pickle.

    save_state(path, tree)      write atomically
    load_state(path) -> tree    read back; CheckpointError for anything else
    dumps_state / loads_state   the same as bytes (messages between payoff's processes)

A tree is dicts (any hashable keys of the kinds below), lists, tuples, str, int (any size),
float (nan and inf included), bool, None, bytes, torch tensors, NumPy arrays and NumPy
scalars. Tensors and arrays are the safetensors entries, named by their place in the tree
(`state/actor/logits.0.weight`); the rest is JSON in the file's header metadata, under
`payoff.tree`, where a tensor or array appears as `{"~": "tensor", "key": <entry name>}`.
Other values that JSON cannot say exactly are tagged objects as well (`{"~": "tuple", ...}`,
`"int"`, `"float"`, `"bytes"`, `"dict"` for dicts with non-string keys, `"ndarray"`);
a plain JSON object is a dict with string keys. The file opens with any safetensors reader.

Loading reads JSON and raw numbers only: nothing in the file can name a class or function to
call. Unknown tags, wrong types, missing entries and files from other tools are refused
with a CheckpointError that names the file and what is wrong.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from payoff.core.errors import CheckpointError
from payoff.core.io import TooLarge, atomic_write_bytes, check_json_shape
from payoff.sandbox.child import NotPlainData, refuse_shared_hashes

STATE_FORMAT = "payoff-state/1"
FORMAT_KEY = "payoff.format"
TREE_KEY = "payoff.tree"
# The JSON part is checked before it is parsed (json.loads spends ~90 bytes per `[]`: 60 MB of
# them peaked at 3.2 GB). The tensors have no limit beyond the file's size.
MAX_TREE_CHARS = 64 * 2**20
MAX_TREE_VALUES = 4_000_000  # in the JSON part; the largest measured (pendulum-mbpo) has ~4,000
MAX_DEPTH = 256  # of the tree; a tagged value (a tuple) is two JSON levels
EXACT_JSON_INT = 2**53  # larger ints are written as decimal strings (exact in any reader)

# dtypes safetensors stores natively (torch name -> safetensors name)
_TORCH_DTYPES = {
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint64,
    torch.uint32,
    torch.uint16,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
}
# NumPy dtypes that go through torch unchanged; others (complex128, strings, long double)
# are stored as raw bytes next to their dtype string.
_NUMPY_VIA_TORCH = {
    np.dtype(name)
    for name in [
        "float64",
        "float32",
        "float16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint64",
        "uint32",
        "uint16",
        "uint8",
        "bool",
        "complex64",
    ]
}
# the torch dtypes of those, which come back as NumPy arrays
_TORCH_VIA_NUMPY = {torch.from_numpy(np.zeros(0, dtype)).dtype for dtype in _NUMPY_VIA_TORCH}
_RAW_DTYPE = re.compile(r"[<>|=]?[biufcUS]\d{1,4}")


# ---- writing ------------------------------------------------------------------------------
def save_state(path: str | Path, tree: Any) -> Path:
    """Write `tree` to `path` as one safetensors file, atomically."""
    atomic_write_bytes(path, dumps_state(tree))
    return Path(path)


def dumps_state(tree: Any) -> bytes:
    """The bytes `save_state` writes."""
    from safetensors.torch import save

    encoder = _Encoder()
    encoded = encoder.encode(tree, ())
    metadata = {
        FORMAT_KEY: STATE_FORMAT,
        TREE_KEY: json.dumps(encoded, allow_nan=False, separators=(",", ":")),
    }
    return save(encoder.tensors, metadata=metadata)


class _Encoder:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[int] = set()

    def encode(self, value: Any, where: tuple[Any, ...]) -> Any:
        if len(where) > MAX_DEPTH:
            raise CheckpointError(f"cannot save {_where(where)}: nested deeper than {MAX_DEPTH}")
        if value is None or isinstance(value, bool | str):
            return str(value) if isinstance(value, np.str_) else value
        if isinstance(value, np.generic):  # before int/float: np.float64 is a float
            return {**self._array(np.asarray(value), where), "scalar": True}
        if isinstance(value, int):
            value = int(value)
            if abs(value) < EXACT_JSON_INT:
                return value
            return {"~": "int", "value": str(value)}
        if isinstance(value, float):
            value = float(value)
            if math.isfinite(value):
                return value
            return {"~": "float", "value": "nan" if math.isnan(value) else str(value)}
        if isinstance(value, bytes):
            return {"~": "bytes", "base64": base64.b64encode(value).decode("ascii")}
        if isinstance(value, torch.Tensor):
            return self._tensor(value, where)
        if isinstance(value, np.ndarray):
            return self._array(value, where)
        if isinstance(value, list):
            return [self.encode(v, (*where, i)) for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return {
                "~": "tuple",
                "items": [self.encode(v, (*where, i)) for i, v in enumerate(value)],
            }
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and "~" not in value:
                return {k: self.encode(v, (*where, k)) for k, v in value.items()}
            return {
                "~": "dict",
                "items": [
                    [self.encode(k, (*where, "<key>")), self.encode(v, (*where, k))]
                    for k, v in value.items()
                ],
            }
        raise CheckpointError(
            f"cannot save {_where(where)}: a {type(value).__module__}.{type(value).__qualname__} "
            f"is not data (checkpoints hold dicts, lists, tuples, str, numbers, bool, None, "
            f"bytes, tensors and NumPy arrays)"
        )

    def _name(self, where: tuple[Any, ...]) -> str:
        base = "/".join(str(part) for part in where) or "."
        name, n = base, 1
        while name in self.tensors or name == "__metadata__":
            n += 1
            name = f"{base}#{n}"
        return name

    def _store(self, tensor: torch.Tensor, where: tuple[Any, ...]) -> str:
        tensor = tensor.detach().to("cpu").contiguous()
        if tensor.numel():
            # safetensors refuses tensors that share memory: copy views and repeats
            storage = tensor.untyped_storage()
            whole = storage.nbytes() == tensor.numel() * tensor.element_size()
            if not whole or storage.data_ptr() in self._storages:
                tensor = tensor.clone()
            self._storages.add(tensor.untyped_storage().data_ptr())
        name = self._name(where)
        self.tensors[name] = tensor
        return name

    def _tensor(self, value: torch.Tensor, where: tuple[Any, ...]) -> dict[str, Any]:
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise CheckpointError(f"cannot save {_where(where)}: a {value.layout} tensor")
        if value.dtype not in _TORCH_DTYPES:
            raise CheckpointError(
                f"cannot save {_where(where)}: safetensors has no {value.dtype} tensors"
            )
        return {"~": "tensor", "key": self._store(value, where)}

    def _array(self, value: np.ndarray, where: tuple[Any, ...]) -> dict[str, Any]:
        dtype = value.dtype
        if dtype.newbyteorder("=") in _NUMPY_VIA_TORCH:
            native = np.asarray(value, dtype=dtype.newbyteorder("="), order="C")  # keeps 0-d
            if not native.flags.writeable:  # (Ray hands out read-only arrays; torch warns)
                native = native.copy()
            return {"~": "ndarray", "key": self._store(torch.from_numpy(native), where)}
        if _RAW_DTYPE.fullmatch(dtype.str) is None:
            raise CheckpointError(
                f"cannot save {_where(where)}: NumPy dtype {dtype} is not plain data"
            )
        raw = np.frombuffer(value.tobytes(order="C"), dtype=np.uint8)
        return {
            "~": "ndarray",
            "key": self._store(torch.from_numpy(raw.copy()), where),
            "dtype": dtype.str,
            "shape": list(value.shape),
        }


# ---- reading ------------------------------------------------------------------------------
def load_state(path: str | Path, what: str = "checkpoint") -> Any:
    """Read a tree written by `save_state`. `what` names the file in errors ("policy file")."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no {what} at {str(path)!r}")
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
    except OSError as err:
        raise CheckpointError(f"cannot read {what} {str(path)!r}: {err.strerror}") from None
    found = sniff_format(head)
    if found != "safetensors":
        raise CheckpointError(f"{what} {str(path)!r} {found}")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return _read_tree(handle.metadata() or {}, handle, set(handle.keys()), str(path), what)
    except (SafetensorError, OSError, MemoryError, ValueError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(
            f"{what} {str(path)!r} is corrupt or truncated ({type(err).__name__}: {detail})"
        ) from None


def loads_state(data: bytes, what: str = "message") -> Any:
    """Read a tree from the bytes `dumps_state` made (a message between processes), with
    the same checks as `load_state`: data only, nothing in it can name code to run."""
    found = sniff_format(data[:9])
    if found != "safetensors":
        raise CheckpointError(f"{what} {found}")
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        size = int.from_bytes(data[:8], "little")
        text = data[8 : 8 + size].decode("utf-8")
        try:  # (the tree is one string inside the header)
            check_json_shape(text, 2 * MAX_TREE_CHARS, MAX_TREE_VALUES, 8)
        except TooLarge as err:
            raise CheckpointError(f"{what} is malformed: its header has {err}") from None
        header = json.loads(text, parse_constant=_no_constant)
        metadata = (header.get("__metadata__") if isinstance(header, dict) else None) or {}
        tensors = load(data)
        return _read_tree(metadata, _Entries(tensors), set(tensors), "<bytes>", what)
    except (SafetensorError, MemoryError, ValueError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(
            f"{what} is corrupt or truncated ({type(err).__name__}: {detail})"
        ) from None


class _Entries(dict[str, torch.Tensor]):
    """Tensors already in memory, read like a safetensors file handle."""

    def get_tensor(self, key: str) -> torch.Tensor:
        return self[key]


def _read_tree(metadata: dict[str, str], handle: Any, keys: set[str], name: str, what: str) -> Any:
    """The tree in a safetensors file's metadata, its tensors from `handle`."""
    if metadata.get(FORMAT_KEY) != STATE_FORMAT or TREE_KEY not in metadata:
        found_format = metadata.get(FORMAT_KEY)
        raise CheckpointError(
            f"{what} {name!r} is a safetensors file but not a payoff checkpoint "
            + (
                f"(its format is {found_format!r}, expected {STATE_FORMAT!r})"
                if found_format
                else f"(no {FORMAT_KEY!r} in its metadata)"
            )
        )
    text = metadata[TREE_KEY]
    try:
        check_json_shape(text, MAX_TREE_CHARS, MAX_TREE_VALUES, 2 * MAX_DEPTH + 2)
    except TooLarge as err:
        raise CheckpointError(
            f"{what} {name!r} is malformed: its JSON part ({TREE_KEY!r}) has {err}; "
            f"payoff writes small ones (the tensors are outside it), so the file was made "
            f"or changed by something else"
        ) from None
    try:
        encoded = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise CheckpointError(
            f"{what} {name!r} is malformed: its {TREE_KEY!r} is not valid JSON ({err})"
        ) from None
    return _Decoder(handle, keys, name, what).decode(encoded, ())


def sniff_format(head: bytes) -> str:
    """'safetensors', or a sentence saying what the file is instead (for error messages)."""
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    legacy = (
        "is {}; payoff no longer loads pickles because unpickling can run arbitrary code; "
        "expected a payoff safetensors checkpoint: retrain, or convert the file where you "
        "trust its origin"
    )
    if head.startswith(b"PK\x03\x04"):
        return legacy.format(
            "a zip archive of pickles (torch.save's format; Stable-Baselines3 saves models so)"
        )
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        # (a safetensors header length may start with 0x80 too: 16,000 is 80 3e 00 ...)
        return legacy.format("a pickle (payoff 0.1 and torch.save wrote these)")
    if not head:
        return "is empty (a run killed while writing it leaves no such file: it was truncated)"
    if len(head) < 9:
        return f"is {len(head)} bytes long, cut short of any checkpoint: the file is truncated"
    return "is corrupt or not a payoff checkpoint (expected a safetensors file)"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _Decoder:
    def __init__(self, handle: Any, keys: set[str], name: str, what: str):
        self.handle = handle
        self.keys = keys
        self.used: set[str] = set()  # each entry is read once: no 1 GB tensor read 1000 times
        self.path = name
        self.what = what

    def fail(self, where: tuple[Any, ...], problem: str) -> CheckpointError:
        return CheckpointError(
            f"{self.what} {str(self.path)!r} is malformed: {problem} at {_where(where)}"
        )

    def decode(self, value: Any, where: tuple[Any, ...]) -> Any:
        if len(where) > MAX_DEPTH:
            raise self.fail(where, f"nesting deeper than {MAX_DEPTH}")
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, list):
            return [self.decode(v, (*where, i)) for i, v in enumerate(value)]
        if not isinstance(value, dict):  # json.loads makes nothing else
            raise self.fail(where, f"unexpected {type(value).__name__}")
        if "~" not in value:
            return {k: self.decode(v, (*where, k)) for k, v in value.items()}
        tag = value["~"]
        if tag == "tuple":
            items = self.field(value, "items", list, where)
            return tuple(self.decode(v, (*where, i)) for i, v in enumerate(items))
        if tag == "dict":
            pairs = self.field(value, "items", list, where)
            if not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
                raise self.fail(where, "a dict item that is not a [key, value] pair")
            keys = [self.decode(pair[0], (*where, "<key>")) for pair in pairs]
            try:  # before any dict is built from them: keys made to collide take hours
                refuse_shared_hashes(keys)
            except TypeError as err:
                raise self.fail(where, f"an unhashable dict key ({err})") from None
            except NotPlainData as err:
                raise self.fail(where, str(err)) from None
            return {
                key: self.decode(pair[1], (*where, key))
                for key, pair in zip(keys, pairs, strict=True)
            }
        if tag == "int":
            text = self.field(value, "value", str, where)
            if not re.fullmatch(r"-?\d{1,4000}", text):
                raise self.fail(where, f"an int that is not a decimal number ({text[:40]!r})")
            return int(text)
        if tag == "float":
            text = self.field(value, "value", str, where)
            if text not in ("nan", "inf", "-inf"):
                raise self.fail(where, f"a float tag with value {text[:40]!r}")
            return float(text)
        if tag == "bytes":
            text = self.field(value, "base64", str, where)
            try:
                return base64.b64decode(text, validate=True)
            except ValueError:
                raise self.fail(where, "bytes that are not base64") from None
        if tag == "tensor":
            tensor = self.entry(value, where)
            return tensor
        if tag == "ndarray":
            return self.array(value, where)
        raise self.fail(where, f"unknown tag {str(tag)[:40]!r}")

    def field(self, value: dict[str, Any], name: str, kind: type, where: tuple[Any, ...]) -> Any:
        if name not in value or not isinstance(value[name], kind):
            raise self.fail(where, f"tag {value['~']!r} without a {kind.__name__} {name!r}")
        return value[name]

    def entry(self, value: dict[str, Any], where: tuple[Any, ...]) -> torch.Tensor:
        key = self.field(value, "key", str, where)
        if key not in self.keys:
            raise self.fail(where, f"no tensor named {key[:80]!r} in the file")
        if key in self.used:
            raise self.fail(where, f"tensor {key[:80]!r} is used twice")
        self.used.add(key)
        return self.handle.get_tensor(key)

    def array(self, value: dict[str, Any], where: tuple[Any, ...]) -> Any:
        tensor = self.entry(value, where)
        scalar = value.get("scalar", False)
        if not isinstance(scalar, bool):
            raise self.fail(where, "an ndarray whose 'scalar' is not true/false")
        if "dtype" not in value:
            if tensor.dtype not in _TORCH_VIA_NUMPY:
                raise self.fail(where, f"an ndarray of {tensor.dtype}, which NumPy lacks")
            array = tensor.numpy()
        else:
            dtype_text = self.field(value, "dtype", str, where)
            shape = self.field(value, "shape", list, where)
            if _RAW_DTYPE.fullmatch(dtype_text) is None:
                raise self.fail(where, f"NumPy dtype {dtype_text[:40]!r} is not plain data")
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
                raise self.fail(where, f"shape {shape!r} is not a list of sizes")
            try:
                dtype = np.dtype(dtype_text)
            except TypeError:
                raise self.fail(where, f"NumPy has no dtype {dtype_text!r}") from None
            if tensor.dtype != torch.uint8 or tensor.dim() != 1:
                raise self.fail(where, "raw array bytes that are not a flat uint8 tensor")
            if math.prod(shape) * dtype.itemsize != tensor.numel():
                raise self.fail(
                    where,
                    f"{tensor.numel()} bytes for a {dtype} array of shape {tuple(shape)}",
                )
            array = np.frombuffer(tensor.numpy().tobytes(), dtype=dtype).reshape(shape).copy()
        if scalar:
            if array.ndim != 0:
                raise self.fail(where, f"a NumPy scalar of shape {array.shape}")
            return array[()]
        return array


def _where(where: tuple[Any, ...]) -> str:
    return "the tree's root" if not where else "/".join(str(p) for p in where)[:200]
