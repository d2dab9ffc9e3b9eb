"""Your data: every file type, TRL's standard and conversational formats, errors naming file:line."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest

from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks import TaskConfig, make_task, read_rows
from payoff.envs.tasks.datasets import read_records, render_chat
from payoff.envs.tasks.preferences import PreferenceDataConfig, load_pairs, read_preferences

ROWS = [{"prompt": "2+2=", "answer": "4"}, {"prompt": "3+3=", "answer": "6"}]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


# Each writer saves rows as one file type and returns the path to pass as task.data.
def write_jsonl(rows, path):
    path = path.with_suffix(".jsonl")
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_json_list(rows, path):
    path = path.with_suffix(".json")
    path.write_text(json.dumps(rows, indent=1))
    return path


def write_json_lines(rows, path):  # Hugging Face's json loader reads JSON lines in .json too
    path = path.with_suffix(".json")
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_csv(rows, path):
    path = path.with_suffix(".csv")
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(rows, path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = path.with_suffix(".parquet")
    pq.write_table(pa.table(as_columns(rows)), path)
    return path


def write_folder(rows, path):
    from datasets import Dataset

    Dataset.from_dict(as_columns(rows)).save_to_disk(str(path))
    return path


def as_columns(rows):
    # Every column any row has (a missing value is null), not only the first row's.
    names = dict.fromkeys(key for row in rows for key in row)
    return {name: [row.get(name) for row in rows] for name in names}


WRITERS = [write_jsonl, write_json_list, write_json_lines, write_csv, write_parquet, write_folder]
IDS = ["jsonl", "json-list", "json-lines", "csv", "parquet", "save_to_disk"]
CONVERSATIONAL = [write_jsonl, write_json_list, write_parquet, write_folder]  # not CSV


# ---- file types -------------------------------------------------------------------------------
@pytest.mark.parametrize("write", WRITERS, ids=IDS)
def test_every_file_type_reads_the_same_problems(tmp_path, write):
    path = write([{**ROWS[0], "source": "hand"}, ROWS[1]], tmp_path / "train")
    rows = read_rows(path)
    assert [(r["prompt"], r["answer"], r["key"]) for r in rows] == [
        ("2+2=", "4", "2+2="),
        ("3+3=", "6", "3+3="),
    ]
    assert rows[0]["source"] == "hand"
    task = make_task(TaskConfig(name="jsonl", data=str(path), test_data=str(path)))
    assert task.sample(np.random.default_rng(0), 3)[0]["prompt"] in ("2+2=", "3+3=")


@pytest.mark.parametrize(
    ("write", "where"),
    [
        (write_jsonl, "bad.jsonl:2"),
        (write_json_list, "bad.json:row 1"),
        (write_json_lines, "bad.json:2"),
        (write_csv, "bad.csv:3"),
        (write_parquet, "bad.parquet:row 1"),
        (write_folder, "bad:row 1"),
    ],
    ids=IDS,
)
def test_a_bad_row_names_its_file_line_and_column(tmp_path, write, where):
    path = write([ROWS[0], {"prompt": "3+3=", "note": "no answer"}], tmp_path / "bad")
    with pytest.raises(DataError) as err:
        read_rows(path)
    message = str(err.value)
    assert f"{where}: needs an 'answer'" in message, message
    assert (
        "'solution'" in message
        and "'tests'" in message
        and "columns: ['note', 'prompt']" in message
    )


def test_csv_lines_count_quoted_cells_that_span_lines(tmp_path):
    path = write_csv(
        [
            {"prompt": "def f():\n    return", "tests": "assert f() == 1"},
            {"prompt": "", "tests": "assert True"},
        ],
        tmp_path / "code",
    )
    with pytest.raises(DataError, match=r"code.csv:4: missing a non-empty string 'prompt'"):
        read_rows(path)
    # a row of empty cells (',': a spreadsheet's trailing row) is blank, as a blank line is
    rows = [{"prompt": "def g():", "tests": "assert True"}, {"prompt": "", "tests": ""}]
    assert len(read_rows(write_csv(rows, tmp_path / "trailing"))) == 1


def test_file_types_that_cannot_be_read_say_what_can(tmp_path):
    folder = write_folder(ROWS, tmp_path / "saved")
    shard = next(folder.glob("*.arrow"))
    with pytest.raises(
        DataError, match=rf"one shard of a datasets folder.*pass the folder .*'{folder}'"
    ):
        read_rows(shard)
    (tmp_path / "rows.txt").write_text("2+2=4\n")
    with pytest.raises(DataError, match=r"unsupported file type '.txt'; supported: .jsonl, .json"):
        read_rows(tmp_path / "rows.txt")
    (tmp_path / "plain").mkdir()
    with pytest.raises(DataError, match="not one that datasets' save_to_disk wrote"):
        read_rows(tmp_path / "plain")
    with pytest.raises(DataError, match="dataset file .*missing.jsonl' does not exist"):
        read_rows(tmp_path / "missing.jsonl")
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"data": ROWS}, indent=1))
    with pytest.raises(DataError, match="one object whose 'data' holds the rows"):
        read_rows(wrapped)


def test_a_missing_optional_package_names_the_extra(tmp_path, monkeypatch):
    path = write_parquet(ROWS, tmp_path / "train")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails
    with pytest.raises(
        ConfigError, match=r"\.parquet files needs pyarrow: pip install 'payoff\[llm\]'"
    ):
        read_rows(path)
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "state.json").write_text("{}")  # what marks a save_to_disk folder
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ConfigError, match=r"folder needs datasets: pip install 'payoff\[llm\]'"):
        read_rows(folder)


def test_a_dataset_dict_folder_gives_its_train_test_and_ood_splits(tmp_path):
    from datasets import Dataset, DatasetDict

    splits = {
        "train": [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(5)],
        "test": [{"prompt": "9+1=", "answer": "10"}],
    }
    folder = tmp_path / "dict"
    DatasetDict({k: Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(folder))
    task = make_task(TaskConfig(name="jsonl", data=str(folder)))
    assert len(task.train_rows) == 5 and task.split("test", 10)[0]["prompt"] == "9+1="
    assert task.has_split("test") and not task.has_split("ood")
    assert read_records(folder, "test")[0][0] == f"{folder / 'test'}:row 0"
    with pytest.raises(DataError, match="without a 'ood' split; its splits: train, test"):
        make_task(TaskConfig(name="jsonl", data=str(folder), ood_data=str(folder)))


# ---- TRL's formats for problems (GRPO, evaluation) and SFT --------------------------------------
@pytest.mark.parametrize(
    "write", CONVERSATIONAL, ids=["jsonl", "json-list", "parquet", "save_to_disk"]
)
def test_conversational_problems_render_as_text_and_keep_their_messages(tmp_path, write):
    # A Parquet column holds one type, so each TRL format gets a file of its own.
    system = [{"role": "system", "content": "Add."}]
    (first,) = read_rows(
        write([{"prompt": system + user("2+2="), "completion": assistant("4")}], tmp_path / "pc")
    )
    (second,) = read_rows(write([{"messages": user("3+3=") + assistant("6")}], tmp_path / "msg"))
    assert first["prompt"] == "system: Add.\nuser: 2+2=\nassistant: " and first["answer"] == "4"
    assert first["prompt_messages"] == system + user("2+2=")
    assert second["prompt"] == render_chat(user("3+3=")) and second["answer"] == "6"
    assert second["prompt_messages"] == user("3+3=")


def test_every_reference_column_and_text_rows(tmp_path):
    path = write_jsonl(
        [
            {"prompt": "a", "solution": "1"},
            {"prompt": "b", "ground_truth": 2},
            {"prompt": "c", "completion": " 3"},
            {"prompt": "d", "answer": 4.5, "solution": "ignored"},
            {"text": "The sky is blue."},
        ],
        tmp_path / "refs",
    )
    rows = read_rows(path)
    assert [r["answer"] for r in rows] == ["1", "2", " 3", "4.5", "The sky is blue."]
    assert rows[-1]["prompt"] == "" and rows[-1]["key"] == "The sky is blue."
    # text rows train SFT (the whole text is the completion) but have nothing to evaluate
    task = make_task(TaskConfig(name="jsonl", data=str(path), test_data=str(path)))
    with pytest.raises(DataError, match="'test' split holds 'text' rows.*pass task.test_data"):
        task.split("test", 10)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"answer": "1"},
            "missing a non-empty string 'prompt'; a problem row has prompt with answer",
        ),
        ({"prompt": 3, "answer": "1"}, "missing a non-empty string 'prompt' (or a list of chat"),
        (
            {"prompt": [{"role": "user"}], "answer": "1"},
            "column 'prompt', message 0: needs string 'role' and 'content'",
        ),
        ({"messages": user("hi")}, "column 'messages' must end with an assistant turn"),
        (
            {
                "messages": user("2+2?")
                + [{"role": "assistant", "content": "", "tool_calls": [{"name": "add"}]}]
                + [{"role": "tool", "content": "4"}]
                + assistant("4")
            },
            "column 'messages', message 1 holds 'tool_calls', which payoff's data rows do not",
        ),
        (
            {"prompt": "x", "completion": user("1") + assistant("1")},
            "'completion' must be a string or one assistant message",
        ),
        ({"prompt": "x", "answer": ["1"]}, "'answer' must be a string or number, got ['1']"),
        ({"prompt": "x", "answer": float("nan")}, "'answer' is nan (an empty cell"),
        ({"prompt": "x", "tests": 3}, "'tests' must be a string of Python asserts"),
        ({"text": ""}, "column 'text' must be a non-empty string"),
    ],
)
def test_problem_row_errors_name_the_column(tmp_path, row, message):
    path = write_jsonl([ROWS[0], row], tmp_path / "bad")
    with pytest.raises(DataError) as err:
        read_rows(path)
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value), str(err.value)


def test_the_task_without_ood_data_has_no_ood_split(tmp_path):
    path = write_jsonl(ROWS, tmp_path / "train")
    task = make_task(TaskConfig(name="jsonl", data=str(path), test_data=str(path)))
    assert task.has_split("test") and not task.has_split("ood")
    assert make_task(TaskConfig(name="addition")).has_split("ood")
    with pytest.raises(ConfigError, match="split 'ood' has no rows; pass task.ood_data"):
        task.split("ood", 4)
    with pytest.raises(
        ConfigError, match=r"takes no options, got \{'digits': 2\}; set task.options=\{\}"
    ):
        make_task(TaskConfig(name="jsonl", data=str(path), options={"digits": 2}))


# ---- preference pairs (DPO, reward models) --------------------------------------------------------
@pytest.mark.parametrize(
    "write", CONVERSATIONAL, ids=["jsonl", "json-list", "parquet", "save_to_disk"]
)
def test_preference_formats_standard_conversational_and_implicit_prompt(tmp_path, write):
    formats = [
        {"prompt": "3+4=", "chosen": "7", "rejected": "Great question! 9"},
        {"prompt": user("3+4="), "chosen": assistant("7"), "rejected": assistant("9")},
        {"chosen": "The sky is blue.", "rejected": "The sky is green."},
        {"chosen": user("Sky?") + assistant("Blue."), "rejected": user("Sky?") + assistant("No.")},
    ]
    standard, chat, implicit, implicit_chat = (
        read_preferences(write([row], tmp_path / f"pairs{i}"))[0] for i, row in enumerate(formats)
    )
    assert (standard["prompt"], standard["chosen"], standard["rejected"]) == (
        "3+4=",
        "7",
        "Great question! 9",
    )
    assert (chat["prompt"], chat["chosen"], chat["rejected"]) == (
        "user: 3+4=\nassistant: ",
        "7",
        "9",
    )
    assert chat["prompt_messages"] == user("3+4=")
    # TRL's extract_prompt: the shared start, a space before the difference going to the completions
    assert (implicit["prompt"], implicit["chosen"], implicit["rejected"]) == (
        "The sky is",
        " blue.",
        " green.",
    )
    assert implicit_chat["prompt"] == "user: Sky?\nassistant: "
    assert (implicit_chat["chosen"], implicit_chat["rejected"]) == ("Blue.", "No.")


def test_preference_csv_and_dataset_dict_test_split(tmp_path):
    from datasets import Dataset, DatasetDict

    pairs = [{"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": str(i)} for i in range(4)]
    assert read_preferences(write_csv(pairs, tmp_path / "pairs")) == pairs
    folder = tmp_path / "dict"
    DatasetDict(
        {"train": Dataset.from_list(pairs[:3]), "test": Dataset.from_list(pairs[3:])}
    ).save_to_disk(str(folder))
    train, test = load_pairs(PreferenceDataConfig(path=str(folder)), task=None, seed=0)
    assert train == pairs[:3] and test == pairs[3:]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "x", "chosen": "a"}, "needs a string 'rejected' (or a list of chat messages)"),
        (
            {"chosen": "abc", "rejected": "xyz"},
            "must start with the same prompt and then differ; they share no start",
        ),
        ({"chosen": "ab", "rejected": "abc"}, "one is the start of the other"),
        ({"chosen": "same", "rejected": "same"}, "'chosen' and 'rejected' are identical"),
        ({"chosen": user("a"), "rejected": "a"}, "must both be texts or both conversations"),
        (
            {"prompt": user("x"), "chosen": user("a"), "rejected": assistant("b")},
            "column 'chosen' must be a string or one assistant message",
        ),
        ({"prompt": "", "chosen": "a", "rejected": "b"}, "'prompt' is empty"),
    ],
)
def test_preference_row_errors_name_file_line_and_column(tmp_path, row, message):
    good = {"prompt": "1+1=", "chosen": "2", "rejected": "3"}
    path = write_jsonl([good, row], tmp_path / "bad")
    with pytest.raises(DataError) as err:
        read_preferences(path)
    assert str(err.value).startswith(f"{path}:2: ") and message in str(err.value), str(err.value)


# ---- end to end: the documented own-data GRPO command ---------------------------------------------
@pytest.fixture(scope="module")
def fresh_model_dir(tmp_path_factory):
    """An untrained tiny model: the run starts from it instead of pretraining a base model."""
    pytest.importorskip("transformers", reason="the llm extra is not installed")
    from payoff.models.lm import ModelConfig, load_lm, save_lm

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("fresh") / "model"))


def _own_data(tmp_path) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    problems = [(int(a), int(b)) for a, b in rng.integers(0, 50, size=(40, 2))]
    # the docs' example: conversations in Parquet to train on, prompt/completion ones in JSONL to test
    train = write_parquet(
        [{"messages": user(f"{a}+{b}=") + assistant(str(a + b))} for a, b in problems[:30]],
        tmp_path / "train",
    )
    test = write_jsonl(
        [
            {"prompt": user(f"{a}+{b}="), "completion": assistant(str(a + b))}
            for a, b in problems[30:]
        ],
        tmp_path / "test",
    )
    return str(train), str(test)


TINY = [
    "steps=2",
    "prompts_per_step=4",
    "group_size=4",
    "max_new_tokens=4",
    "eval_every=2",
    "checkpoint_every=2",
    "final_eval_k=[1,2]",
    "task.eval_size=4",
]


def test_the_documented_own_data_grpo_command_trains_on_a_train_and_a_test_file(
    tmp_path, fresh_model_dir
):
    """The docs' command, on conversations from Parquet (train) and JSONL (test): the recipe's
    task.options are dropped with its task, and there is no ood split to evaluate."""
    from payoff.train import train

    data, test_data = _own_data(tmp_path)
    overrides = ["task.name=jsonl", f"task.data={data}", f"task.test_data={test_data}"]
    run = train(
        "arithmetic-grpo",
        [*overrides, f"model.path={fresh_model_dir}", *TINY],
        out=tmp_path / "runs",
        media=False,
    )
    summary = run.summary()
    assert summary["steps"] == 2 and summary["final_eval"]["problems"] == 4
    assert summary["ood_accuracy"] is None and (run.path / "model" / "model.safetensors").is_file()
    example = summary["final_eval"]["examples"][0]
    assert example["prompt"].startswith("user: ") and example["prompt"].endswith("assistant: ")


@pytest.mark.parametrize(
    "name, content",
    [
        ("deep.jsonl", '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
        ("bigint.jsonl", '{"prompt": "a", "answer": ' + "9" * 5000 + "}\n"),
        ("big.csv", "prompt,answer\n" + "x" * 200_000 + ",1\n"),
        ("bad.parquet", "PAR1 not parquet"),
    ],
)
def test_a_hostile_data_file_is_one_data_error(tmp_path, name, content):
    (tmp_path / name).write_text(content)
    with pytest.raises(DataError, match=f"cannot be read as {name.split('.')[-1]}"):
        read_records(tmp_path / name)


def test_a_file_that_is_not_utf8_is_named_by_line(tmp_path):
    # the error gave the decoder's byte position (541), not a line a user can find
    path = tmp_path / "rows.jsonl"
    path.write_bytes(
        b'{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": "2"}\n{"prompt": "\xff"}\n'
    )
    with pytest.raises(
        DataError, match="cannot be read as jsonl at line 3: bytes that are not UTF-8"
    ):
        read_records(str(path))
    csv = tmp_path / "rows.csv"  # decoded by a stream, chunk by chunk
    csv.write_bytes(b"prompt,answer\n" + b"a,1\n" * 2500 + b"\xff,2\n" + b"b,3\n" * 10)
    with pytest.raises(DataError, match="cannot be read as csv at line 2502"):
        read_records(str(csv))
