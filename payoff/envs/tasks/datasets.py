"""Reading your data: one reader for JSONL, JSON, CSV, Parquet and `save_to_disk` folders.

Every row comes back with where it came from, so a bad row is an error that points at it:

    train.jsonl:12        JSONL (and a JSON-lines .json): the line
    pairs.csv:7           CSV: the line the record starts on (the header is line 1)
    train.parquet:row 3   Parquet, a JSON list, a datasets folder: the row index, as dataset[3]

Rows follow TRL's dataset formats, standard (strings) or conversational (lists of
`{"role", "content"}` messages). What a row must hold depends on its use; the problem
reader (`jsonl.read_rows`) and the preference reader (`preferences.read_preferences`)
check that. This module reads files and the shared pieces: chat messages, how they are
rendered as text for a model without a chat template, and an implicit prompt.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError, DataError, PayoffError
from payoff.core.io import TooLarge, read_text_capped

Message = dict[str, str]
Record = tuple[str, dict[str, Any]]  # ("file:line", the row as read)

SUPPORTED = (
    ".jsonl, .json (a list of rows or one row per line), .csv, .parquet, "
    "or a folder written by datasets' save_to_disk"
)
_EXTRA = "pip install 'payoff[llm]'"


# ---- files and in-memory datasets ---------------------------------------------------------------
def read_records(path: Any, split: str = "train", kind: str = "dataset") -> list[Record]:
    """(`where`, row) for every row of a dataset file or folder, or of a dataset passed from
    Python: a list of dicts, a pandas DataFrame, a Hugging Face `Dataset`, or a `DatasetDict`
    (rows are named 'rows[3]' in errors; NumPy arrays in them read as lists, see `plain`).

    split: which split of a DatasetDict (folder or object) to read (a plain dataset or a
        file has just one, and `split` is ignored).
    kind: how the error for a missing file names it ('dataset', 'preference').
    """
    if not isinstance(path, str | Path):
        return _object_records(path, split, kind)
    path = Path(path).expanduser()
    if path.is_dir():
        return _folder_records(path, split)
    if not path.exists():
        raise DataError(f"{kind} file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    readers = {
        ".jsonl": lambda: list(_json_lines(path, path.read_text(encoding="utf-8-sig"))),
        ".json": lambda: _json_records(path),
        ".csv": lambda: _csv_records(path),
        ".parquet": lambda: _parquet_records(path),
    }
    if suffix in readers:
        try:
            return readers[suffix]()
        except PayoffError:
            raise
        except Exception as err:  # a file may come from anyone: deep nesting, a 5,000-digit
            # number, a CSV field past csv's limit, a corrupt parquet file (pyarrow's errors)
            where = ""
            if isinstance(err, UnicodeDecodeError):  # its position counts bytes, not lines
                # (of the chunk a stream decoded: decode the whole file to place it)
                raw = path.read_bytes()
                try:
                    raw.decode("utf-8-sig")
                except UnicodeDecodeError as whole:
                    line = raw[: whole.start].count(b"\n") + 1
                    where = f" at line {line}: bytes that are not UTF-8 (save the file as UTF-8)"
            raise DataError(
                f"{str(path)!r} cannot be read as {suffix[1:]}{where} ({type(err).__name__}: "
                f"{str(err)[:200]})"
            ) from None
    if suffix == ".arrow":
        folder = path.parent
        hint = (
            f"pass the folder that holds it: {str(folder)!r}"
            if (folder / "state.json").is_file()
            else "pass the folder that Dataset.save_to_disk wrote"
        )
        raise DataError(
            f"{str(path)!r} is one shard of a datasets folder, not a dataset by itself; {hint}"
        )
    raise DataError(
        f"{str(path)!r}: unsupported file type {suffix or '(no extension)'!r}; "
        f"supported: {SUPPORTED}"
    )


HELD_OUT_SPLITS = ("test", "validation", "valid", "dev")


def held_out_split(splits: list[str]) -> str | None:
    """The split of a DatasetDict to hold out: 'test', else 'validation', 'valid' or 'dev'."""
    return next((s for s in HELD_OUT_SPLITS if s in splits), None)


def dataset_splits(path: Any) -> list[str]:
    """The split names of a DatasetDict (a save_to_disk folder or the object); [] otherwise."""
    if not isinstance(path, str | Path):
        return [str(k) for k in path] if _is_dataset_dict(path) else []
    folder = Path(path).expanduser()
    index = folder / "dataset_dict.json"
    if not index.is_file():
        return []
    splits = _index_json(index).get("splits", [])
    if not isinstance(splits, list):
        raise DataError(f"{str(index)!r}: its 'splits' is not a list of split names")
    for split in splits:
        _inside(folder, split, index, "split")
    return [str(split) for split in splits]


MAX_INDEX_BYTES = 2**20  # state.json, dataset_dict.json: save_to_disk writes a few hundred bytes


def _index_json(path: Path) -> dict[str, Any]:
    """A datasets folder's state.json or dataset_dict.json, as a JSON object (DataError else)."""
    try:
        value = json.loads(read_text_capped(path, MAX_INDEX_BYTES, "datasets index"))
    except TooLarge as err:
        raise DataError(f"{err}: datasets writes a few hundred bytes there") from None
    except (ValueError, RecursionError) as err:  # bad JSON or UTF-8, deep, huge numbers
        raise DataError(f"{str(path)!r} is not valid JSON ({str(err)[:200]})") from None
    if not isinstance(value, dict):
        raise DataError(f"{str(path)!r} holds a {type(value).__name__}, not a JSON object")
    return value


def _inside(folder: Path, name: Any, index: Path, what: str) -> Path:
    """`folder / name` for a file or split named in `index`, refused (DataError) when the
    name is not a relative path that stays in `folder`: absolute, `..`, or a symbolic link
    anywhere on the way that leads out. A folder from elsewhere may name any path there."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise DataError(f"{str(index)!r} names a {what} {name!r} that is not a file name")
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts:
        raise DataError(
            f"{str(index)!r} names the {what} {name!r}, outside its folder: a datasets "
            f"folder holds its own files only (save_to_disk writes names like "
            f"'data-00000-of-00001.arrow'); payoff reads nothing outside it"
        )
    path = folder / relative
    try:
        outside = not path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a loop of symbolic links
        outside = True
    if outside:
        raise DataError(
            f"{str(index)!r} names the {what} {name!r}, a symbolic link that leads out of "
            f"its folder; payoff reads nothing outside it"
        )
    return path


def _shards(folder: Path) -> list[Path]:
    """The data files a save_to_disk folder's state.json names, each checked by `_inside`."""
    index = folder / "state.json"
    files = _index_json(index).get("_data_files")
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise DataError(f"{str(index)!r}: its '_data_files' is not a list of {{'filename': ...}}")
    shards = [_inside(folder, f.get("filename"), index, "data file") for f in files]
    for shard in shards:
        if not shard.is_file():
            raise DataError(f"{str(index)!r} names the data file {str(shard)!r}, which is missing")
    return shards


def _bad_shard(shards: list[Path]) -> tuple[Path, Exception] | None:
    """The first shard that pyarrow cannot read by itself, with its error; None if none."""
    import pyarrow as pa

    for shard in shards:
        try:
            with pa.memory_map(str(shard)) as source:
                pa.ipc.open_stream(source).read_all()
        except Exception as err:  # pyarrow's ArrowInvalid, OSError, ...
            return shard, err
    return None


def _object(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataError(f"{where}: each row must be a JSON object, got {type(value).__name__}")
    return value


def _json_lines(path: Path, text: str) -> Iterator[Record]:
    # split('\n'), not splitlines(): JSON strings may hold U+2028 and other line separators.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(value, dict):
            raise DataError(f"{where}: each line must be a JSON object, got {type(value).__name__}")
        yield where, value


def _json_records(path: Path) -> list[Record]:
    # As Hugging Face's json loader: a list of row objects, or JSON lines.
    text = path.read_text(encoding="utf-8-sig")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return list(_json_lines(path, text))
    if isinstance(document, list):
        return [
            (f"{path}:row {i}", _object(f"{path}:row {i}", row)) for i, row in enumerate(document)
        ]
    if isinstance(document, dict):
        wrapped = [key for key, value in document.items() if _holds_rows(value)]
        if wrapped:
            raise DataError(
                f"{path}: a .json dataset is a list of row objects or one object per line; "
                f"this is one object whose {wrapped[0]!r} holds the rows. Save that list "
                "itself (or one row per line)"
            )
        return [(f"{path}:1", document)]
    raise DataError(
        f"{path}: a .json dataset is a list of row objects or one object per line, "
        f"got {type(document).__name__}"
    )


def _holds_rows(value: Any) -> bool:
    # A list of objects that are not chat messages: rows wrapped in a key, e.g. {"data": [...]}.
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "role" not in item for item in value)
    )


def _csv_records(path: Path) -> list[Record]:
    records: list[Record] = []
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        start = 2  # the header is line 1
        for row in reader:
            where = f"{path}:{start}"
            start = reader.line_num + 1  # a quoted cell may span lines
            if None in row:
                raise DataError(
                    f"{where}: more cells than the header has columns ({reader.fieldnames})"
                )
            if all(v in ("", None) for v in row.values()):
                continue  # ',,': a row of empty cells (a spreadsheet's trailing row) is blank
            # An empty cell is a missing value, as pandas and datasets read it.
            records.append((where, {k: (v if v != "" else None) for k, v in row.items()}))
    return records


def _parquet_records(path: Path) -> list[Record]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"reading .parquet files needs pyarrow: {_EXTRA}") from None
    rows = pq.read_table(path).to_pylist()
    return [(f"{path}:row {i}", row) for i, row in enumerate(rows)]


def _is_dataset_dict(value: Any) -> bool:
    return hasattr(value, "keys") and hasattr(value, "column_names") and isinstance(value, dict)


def _object_records(data: Any, split: str, kind: str) -> list[Record]:
    """Rows of a list of dicts, a DataFrame, a datasets.Dataset or a DatasetDict from Python."""
    if _is_dataset_dict(data):
        if split not in data:
            raise DataError(
                f"the DatasetDict passed has no {split!r} split; its splits: "
                f"{', '.join(map(str, data.keys()))}"
            )
        data = data[split]
    if hasattr(data, "to_list") and hasattr(data, "column_names"):  # a datasets.Dataset
        data = data.to_list()
    if (frame_rows := rows_of_frame(data)) is not None:  # a pandas DataFrame
        data = frame_rows
    if isinstance(data, dict) or not isinstance(data, list | tuple):
        raise DataError(
            f"a {kind} passed from Python must be a list of dicts, a pandas DataFrame, a "
            f"datasets.Dataset or a DatasetDict, or a path ({SUPPORTED}); got "
            f"{type(data).__name__}"
        )
    return [(f"rows[{i}]", plain(_object(f"rows[{i}]", row))) for i, row in enumerate(data)]


MAX_PLAIN_DEPTH = 32  # chat data nests 3 deep (column, message, field); a cycle stops here


def plain(value: Any, depth: int = 0) -> Any:
    """`value` with NumPy arrays as lists and NumPy scalars as Python's, at every level.

    A DataFrame read from Parquet (or built from such rows) holds a column of chat messages
    as an object array of dicts, and the dicts' lists as arrays, where JSON and
    `datasets` give lists; rows are checked and rendered as the lists they stand for.
    Past MAX_PLAIN_DEPTH levels values are left as they are (the row checks name them).
    """
    if depth > MAX_PLAIN_DEPTH:
        return value
    if isinstance(value, np.ndarray):
        value = value.tolist()  # an object array's items stay as they are: converted below
    elif isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item, depth + 1) for item in value]
    return value


def _folder_records(folder: Path, split: str) -> list[Record]:
    splits = dataset_splits(folder)
    if splits:
        if split not in splits:
            raise DataError(
                f"{str(folder)!r} is a DatasetDict without a {split!r} split; its splits: "
                f"{', '.join(splits)}"
            )
        folder = folder / split
    if not (folder / "state.json").is_file():
        raise DataError(
            f"{str(folder)!r} is a folder but not one that datasets' save_to_disk wrote "
            f"(no state.json or dataset_dict.json); supported: {SUPPORTED}"
        )
    try:
        from datasets import load_from_disk
    except ImportError:
        raise ConfigError(f"reading a save_to_disk folder needs datasets: {_EXTRA}") from None
    shards = _shards(folder)  # before datasets opens anything state.json names
    try:
        rows = load_from_disk(str(folder)).to_list()
    except Exception as err:  # a corrupt or cut shard (pyarrow's errors), a bad dataset_info
        bad = _bad_shard(shards)
        shard, cause = bad if bad is not None else (folder, err)
        raise DataError(
            f"{str(shard)!r} cannot be read as a datasets {'shard' if bad else 'folder'} "
            f"({type(cause).__name__}: {str(cause)[:200]}); it is corrupt or cut short"
        ) from None
    return [(f"{folder}:row {i}", row) for i, row in enumerate(rows)]


def columns(row: dict[str, Any]) -> list[str]:
    """The columns a row has values in (a CSV or Parquet row holds None where a value is missing)."""
    return sorted(key for key, value in row.items() if value is not None)


# ---- conversations ----------------------------------------------------------------------------
def is_conversation(value: Any) -> bool:
    """Whether a column holds chat messages (a list), as opposed to plain text."""
    return isinstance(value, list)


def messages(where: str, column: str, value: Any) -> list[Message]:
    """The chat messages in `column`, checked: a non-empty list of {'role', 'content'} strings."""
    if not isinstance(value, list) or not value:
        raise DataError(
            f"{where}: column {column!r} must be a non-empty list of chat messages "
            f"{{'role': ..., 'content': ...}}, got {value!r}"
        )
    for i, message in enumerate(value):
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise DataError(
                f"{where}: column {column!r}, message {i}: needs string 'role' and 'content', "
                f"got {message!r}"
            )
        if message.get("tool_calls"):  # would be dropped here: a turn of calls read as empty
            raise DataError(
                f"{where}: column {column!r}, message {i} holds 'tool_calls', which payoff's "
                f"data rows do not carry (only each message's role and content are read). Write "
                f"the call into the message's content as the model should produce it, or drop "
                f"the row; payoff's tool-using agents call tools in their own envs "
                f"(docs/agents.md)"
            )
    return [{"role": m["role"], "content": m["content"]} for m in value]


def render_chat(conversation: list[Message]) -> str:
    """Chat messages as plain text for a model without a chat template, ready for its reply.

    [{"role": "user", "content": "2+2="}]  ->  "user: 2+2=\\nassistant: "
    """
    return "".join(f"{m['role']}: {m['content']}\n" for m in conversation) + "assistant: "


def reply(where: str, column: str, value: Any) -> str:
    """The text of a completion column: a string, or one assistant message."""
    if isinstance(value, str):
        return value
    turns = messages(where, column, value)
    if len(turns) != 1 or turns[0]["role"] != "assistant":
        raise DataError(
            f"{where}: column {column!r} must be a string or one assistant message, got "
            f"{len(turns)} message(s) with roles {[m['role'] for m in turns]}"
        )
    return turns[0]["content"]


def shared_prompt(where: str, chosen: Any, rejected: Any) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected) from an implicit-prompt pair: the start both share is the prompt.

    Texts split at the first differing character, a space before it going to the
    completions (as TRL's extract_prompt); conversations split at the first differing message.
    """
    if is_conversation(chosen) != is_conversation(rejected):
        raise DataError(
            f"{where}: 'chosen' and 'rejected' must both be texts or both conversations"
        )
    if is_conversation(chosen):
        chosen = messages(where, "chosen", chosen)
        rejected = messages(where, "rejected", rejected)
    if chosen == rejected:
        raise DataError(
            f"{where}: 'chosen' and 'rejected' are identical ({chosen!r}); the pair says nothing"
        )
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if isinstance(chosen, str) and shared and chosen[shared - 1] == " ":
        shared -= 1
    if shared == 0 or shared == min(len(chosen), len(rejected)):
        raise DataError(
            f"{where}: without a 'prompt' column, 'chosen' and 'rejected' must start with the "
            f"same prompt and then differ; "
            + ("they share no start" if shared == 0 else "one is the start of the other")
            + ". Add a 'prompt' column"
        )
    return chosen[:shared], chosen[shared:], rejected[shared:]


def rows_of_frame(value: object) -> list[dict[str, Any]] | None:
    """A pandas DataFrame's rows as dicts (`df.to_dict("records")`), what `task=` and
    `preferences=` take from Python; None for anything else."""
    if hasattr(value, "to_dict") and hasattr(value, "columns") and hasattr(value, "iloc"):
        return value.to_dict("records")  # type: ignore[attr-defined, no-any-return]
    return None
