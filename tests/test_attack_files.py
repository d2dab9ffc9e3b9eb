"""Files from elsewhere: a copied run, a downloaded model folder or dataset must cost bounded
time and memory to read, and each refusal is one error that names the file.

Each input here is just over payoff's cap (the attacks they stand for were 60-300 MB).
"""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save as safetensors_save

from payoff.cli import main
from payoff.core.errors import CheckpointError, ConfigError, DataError, RunError
from payoff.core.io import (
    MAX_YAML_CHARS,
    MAX_YAML_NODES,
    TooLarge,
    YAMLTooLarge,
    check_json_shape,
    safe_yaml,
)
from payoff.track.checkpoint import (
    FORMAT_KEY,
    MAX_TREE_VALUES,
    STATE_FORMAT,
    TREE_KEY,
    load_state,
    save_state,
)
from payoff.track.run import MAX_SUMMARY_BYTES, Run


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    argv = ["train", "cartpole-ppo", "total_steps=512", "--no-media", "--out", str(out)]
    assert main(argv) == 0
    return next(out.iterdir())


@pytest.fixture
def copied_run(trained_run, tmp_path) -> Path:
    return Path(shutil.copytree(trained_run, tmp_path / "copied"))


# ---- checkpoints: the JSON part is measured before it is parsed -----------------------------
def test_a_checkpoint_whose_json_part_is_millions_of_lists_is_refused_unparsed(tmp_path):
    # 60 MB of `[]` made `payoff eval` peak at 3.2 GB for two minutes; here just past the cap
    lists = MAX_TREE_VALUES // 2 + 1
    tree = "[" + "[]," * lists + "[]]"
    path = tmp_path / "latest.safetensors"
    path.write_bytes(
        safetensors_save({"x": torch.zeros(1)}, metadata={FORMAT_KEY: STATE_FORMAT, TREE_KEY: tree})
    )
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=r"JSON part .* values .* more than the 4,000,000"):
        load_state(path)
    assert time.perf_counter() - start < 2.0  # (json.loads of it: ~2 s and 300 MB)


def test_real_checkpoints_are_far_inside_the_bounds(tmp_path):
    # a tree shaped like a real one (the largest measured, pendulum-mbpo's, has ~4,400 values)
    tree = {
        "state": {
            f"layer{i}": {"weight": torch.zeros(3), "steps": i, "tag": "[{,"} for i in range(500)
        },
        "history": [[float(i), i, None, "]]"] for i in range(2000)],
    }
    save_state(tmp_path / "ok.safetensors", tree)
    back = load_state(tmp_path / "ok.safetensors")
    assert (
        back["history"][-1] == [1999.0, 1999, None, "]]"] and back["state"]["layer7"]["steps"] == 7
    )


@pytest.mark.parametrize(
    ("text", "bounds", "problem"),
    [
        ('{"a": "[[[[[[[[[[", "b": [1, 2]}', (100, 10, 2), None),  # brackets in strings: none
        ('{"a": "\\"[[[", "b": [[[1]]]}', (100, 10, 3), "nested deeper than 3"),
        ('{"a": "\\"[[[", "b": [[1]]}', (100, 10, 3), None),
        ("[1, 2, 3, 4]", (100, 3, 3), "4 values"),
        ("[" * 50 + "]" * 50, (1000, 100, 49), "deeper than 49"),
        ("[" * 50 + "]" * 50, (1000, 100, 50), None),
        ("[]" * 60, (100, 1000, 5), "120 characters"),
        ('["é[", {"ü": "]]]]"}]', (100, 10, 2), None),
    ],
)
def test_the_json_shape_check_counts_what_json_loads_would_build(text, bounds, problem):
    if problem is None:
        check_json_shape(text, *bounds)
    else:
        with pytest.raises(TooLarge, match=problem):
            check_json_shape(text, *bounds)


def test_a_message_between_processes_is_bounded_too():
    from payoff.track.checkpoint import loads_state

    header = json.dumps(
        {"__metadata__": {FORMAT_KEY: STATE_FORMAT, TREE_KEY: "1"}, "x": [[[[[[[[[[0]]]]]]]]]]}
    )
    data = len(header).to_bytes(8, "little") + header.encode()
    with pytest.raises(CheckpointError, match="header has lists and objects nested deeper than 8"):
        loads_state(data)


# ---- payoff report: summary.json, trajectories.md, config.yaml -----------------------------
def test_a_huge_summary_is_not_read_and_the_report_says_so(copied_run, capsys):
    # a 300 MB summary.json made `payoff report` peak at 1.6 GB
    summary = copied_run / "summary.json"
    with open(summary, "w") as handle:
        handle.write('{"pad": "')
        handle.write("x" * MAX_SUMMARY_BYTES)
        handle.write('"}')
    with pytest.raises(RunError, match=r"summary .* bytes, more than the 16,777,216 payoff reads"):
        Run.open(copied_run).summary()
    assert main(["report", str(copied_run)]) == 0
    page = (copied_run / "media" / "report.html").read_text()
    assert "Its summary is not shown" in page and "more than the 16,777,216" in page
    assert len(page) < 200_000


def test_a_summary_of_millions_of_lists_is_refused_before_parsing(copied_run):
    (copied_run / "summary.json").write_text('{"a": [' + "[]," * 2_000_001 + "[]]}")
    with pytest.raises(RunError, match=r"has 4,000,00\d values .* made or changed elsewhere"):
        Run.open(copied_run).summary()


def test_the_report_reads_only_the_start_of_a_huge_trajectories_file(copied_run):
    # trajectories.md was read whole (300 MB: 1.0 GB peak) for the three episodes it shows
    with open(copied_run / "trajectories.md", "w") as handle:
        handle.write("# Held-out episodes\n\n### episode 0\n")
        for _ in range(3 * 2**20 // 64):
            handle.write("user: " + "y" * 57 + "\n")
    assert main(["report", str(copied_run)]) == 0
    page = (copied_run / "media" / "report.html").read_text()
    assert "<h2>Trajectories</h2>" in page and "[… cut at 1,048,576 bytes]" in page
    assert "past the first 1,048,576 bytes read here" in page
    assert len(page) < 1_300_000  # the first MiB, escaped; not the file's 3 MiB


def test_the_first_episodes_of_a_long_trajectories_file_are_shown_whole(copied_run):
    episodes = "".join(
        f"\n### episode {i}\nuser: 2+{i}\nassistant: {2 + i}\n" for i in range(50_000)
    )
    (copied_run / "trajectories.md").write_text("# Held-out episodes\n" + episodes)
    assert main(["report", str(copied_run)]) == 0
    page = (copied_run / "media" / "report.html").read_text()
    assert "assistant: 4</pre>" in page and "episode 3" not in page and "cut at" not in page


def test_a_long_string_in_config_yaml_is_refused_unread(copied_run, capsys):
    # a 60 MB string held `payoff report` for minutes (the pure-Python loader, several parses)
    with open(copied_run / "config.yaml", "a") as handle:
        handle.write("junk: " + "x" * MAX_YAML_CHARS + "\n")
    start = time.perf_counter()
    assert main(["report", str(copied_run)]) != 0
    err = capsys.readouterr().err
    assert "config.yaml" in err and "more than the 1,048,576 payoff reads" in err
    assert time.perf_counter() - start < 30  # (the CLI's imports; the refusal itself is ms)


def test_a_long_flow_list_is_refused_for_its_values_not_for_aliases(copied_run):
    # a 512 KB flow list took 277 s and was then refused "for aliases" it did not have
    with open(copied_run / "config.yaml", "a") as handle:
        handle.write("junk: [" + "1," * MAX_YAML_NODES + "1]\n")
    start = time.perf_counter()
    with pytest.raises(
        RunError, match="too large to read: it holds more than 100,000 values"
    ) as info:
        Run.open(copied_run).config  # noqa: B018
    assert "alias" not in str(info.value)
    assert time.perf_counter() - start < 10  # (~0.5 s: 100,000 values, then the stop)


def test_safe_yaml_bounds_and_the_alias_bomb_defense():
    assert safe_yaml("a: [" + "1, " * (MAX_YAML_NODES - 10) + "1]")["a"][-1] == 1
    with pytest.raises(YAMLTooLarge, match="characters long, more than the 1,048,576"):
        safe_yaml("a: '" + "x" * MAX_YAML_CHARS + "'")
    bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{b}: &{b} [" + ",".join([f"*{a}"] * 10) + "]\n"
        for a, b in zip("abcde", "bcdef", strict=True)
    )
    with pytest.raises(YAMLTooLarge, match=r"aliases \(\*name\) expand to more than 1,000,000"):
        safe_yaml(bomb)
    assert safe_yaml("base: &b {lr: 1}\nrun: {<<: *b, steps: 3}") == {
        "base": {"lr": 1},
        "run": {"lr": 1, "steps": 3},
    }
    with pytest.raises(yaml.YAMLError, match="given twice"):
        safe_yaml("steps: 1\nsteps: 2\n")


def test_yaml_is_parsed_by_libyaml_where_pyyaml_has_it():
    from payoff.core import io

    if not yaml.__with_libyaml__:
        pytest.skip("this PyYAML was built without libyaml")
    assert issubclass(io._CountingLoader, yaml.CSafeLoader)


def test_a_runs_config_is_parsed_once_while_unchanged(copied_run, monkeypatch):
    import payoff.track.run as run_module

    parses = []
    real = run_module.safe_yaml
    monkeypatch.setattr(run_module, "safe_yaml", lambda text: parses.append(1) or real(text))
    run = Run.open(copied_run)
    first = run.config
    first["algo"] = "changed by a caller"
    assert run.config["algo"] == "ppo" and run.config["seed"] == 0
    assert len(parses) == 1
    run.write_config({**run.config, "seed": 7})
    assert run.config["seed"] == 7 and len(parses) == 2


def test_a_recipe_file_past_the_cap_is_one_config_error(tmp_path):
    from payoff.core.config import load_yaml

    path = tmp_path / "big.yaml"
    path.write_text("a: '" + "x" * MAX_YAML_CHARS + "'\n")
    with pytest.raises(
        ConfigError, match=r"big.yaml' is 1,048,58\d bytes, more than the 1,048,576"
    ):
        load_yaml(path)


# ---- datasets folders from elsewhere ---------------------------------------------------------
@pytest.fixture
def saved_dataset(tmp_path) -> Path:
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "data"
    datasets.Dataset.from_list(
        [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    ).save_to_disk(str(folder))
    return folder


def _name_data_file(folder: Path, name: str) -> None:
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"] = [{"filename": name}]
    (folder / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/passwd", "sub/../../x.arrow"])
def test_a_datasets_folder_naming_a_file_outside_it_is_refused(saved_dataset, name):
    from payoff.envs.tasks.datasets import read_records

    _name_data_file(saved_dataset, name)
    with pytest.raises(DataError, match="outside its folder"):
        read_records(saved_dataset)


def test_a_data_file_that_is_a_link_out_of_the_folder_is_refused(saved_dataset, tmp_path):
    from payoff.envs.tasks.datasets import read_records

    shard = next(saved_dataset.glob("*.arrow"))
    outside = tmp_path / "elsewhere.arrow"
    shutil.move(shard, outside)
    os.symlink(outside, shard)
    with pytest.raises(DataError, match="symbolic link that leads out of its folder"):
        read_records(saved_dataset)


def test_a_dataset_dict_naming_a_split_outside_it_is_refused(tmp_path):
    datasets = pytest.importorskip("datasets")
    from payoff.envs.tasks.datasets import read_records

    folder = tmp_path / "dict"
    datasets.DatasetDict(train=datasets.Dataset.from_list([{"a": 1}])).save_to_disk(str(folder))
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "../../.."]}))
    with pytest.raises(DataError, match=r"names the split '../../..', outside its folder"):
        read_records(folder, split="train")


def test_a_corrupt_shard_is_named_in_the_error(saved_dataset):
    from payoff.envs.tasks.datasets import read_records

    assert len(read_records(saved_dataset)) == 20
    shard = next(saved_dataset.glob("*.arrow"))
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 40] = b"\xff" * 40
    shard.write_bytes(bytes(data[:-30]))
    with pytest.raises(DataError, match=rf"{shard.name}' cannot be read as a datasets shard"):
        read_records(saved_dataset)


# ---- chat templates from a model folder ------------------------------------------------------
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = (
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}"
    '{%- else %}{%- set system_message = "" %}{%- endif %}'
    '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}'
    '{%- if tools is not none %}{{- "Environment: ipython\\n" }}{%- endif %}'
    '{{- system_message }}{{- "<|eot_id|>" }}'
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if tools is not none %}{%- for t in tools %}{{- t | tojson(indent=4) }}{%- endfor %}"
    "{%- endif %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
ALTERNATING = (  # Mistral-style: raise_exception, loop.index0, {% generation %}, namespace, ~
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant') }}{%- endif %}"
    "{%- if message['role'] == 'user' %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}"
    "{%- else %}{% generation %}{{- ' ' + message['content'] + eos_token }}{% endgeneration %}"
    "{%- endif %}{%- endfor %}{% set ns = namespace(n=0) %}"
    "{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ' ' ~ ns.n ~ '/' ~ 2 ** 3 }}"
)
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def char_tokenizer():
    from payoff.models.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.mark.parametrize(
    "template", [CHATML, LLAMA3, ALTERNATING], ids=["chatml", "llama3", "alternating"]
)
def test_payoffs_bounded_rendering_equals_transformers(char_tokenizer, template):
    from payoff.models.chat import render_chat

    char_tokenizer.chat_template = template
    turns = [
        {"role": "user", "content": " 1+1= "},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2="},
    ]
    for messages in ([{"role": "system", "content": "Be brief."}, *turns], turns):
        if template is ALTERNATING and messages[0]["role"] == "system":
            continue
        for generation_prompt in (True, False):
            for tools in (None, TOOLS):
                ours = render_chat(char_tokenizer, messages, generation_prompt, tools)
                theirs = char_tokenizer.apply_chat_template(
                    messages, add_generation_prompt=generation_prompt, tools=tools, tokenize=False
                )
                assert ours == theirs


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{{ 7 ** 2000000000 }}", r"'\*\*' would make a number of more than 4096 bits"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "its loops took more than 1,000,000 steps",
        ),
        ("{{ 'a' * 1000000000 }}", r"'\*' would make more than 4,000,000"),
        ("{{ 'a' | center(1000000000) }}", "the filter 'center' was given 1000000000"),
        ("{{ 'a'.ljust(1000000000) }}", r"ljust\(\) was given 1000000000"),
        (
            "{% set s = namespace(v='ab') %}{% for i in range(60) %}{% set s.v = s.v ~ s.v %}"
            "{% endfor %}",
            "'~' would make more than 4,000,000",
        ),
        (
            "{% set x = 2 ** 4000 %}{% for i in range(40) %}{% set x = x * x %}{% endfor %}",
            r"'\*' made a number of more than 4096 bits",
        ),
        ("{{ ('a' * 3000000) | replace('a', 'aa') }}", "replace would make more than"),
        ("{{ '%0999999999d' % 1 }}", "a format with a width of a million or more"),
        ("{{ '{:>999999999}'.format(1) }}", "a format with a width of a million or more"),
        ("{% for i in range(100000) %}{{ 'x' * 50 }}{% endfor %}", "output is longer than"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ raise_exception('no system turns') }}", "TemplateError: no system turns"),
    ],
)
def test_a_hostile_chat_template_is_one_error_naming_the_model_folder(
    char_tokenizer, template, problem
):
    from payoff.models.chat import prompt_text

    char_tokenizer.chat_template = template
    char_tokenizer.name_or_path = "/models/downloaded-7b"
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=problem) as info:
        prompt_text(char_tokenizer, {"prompt": "1+1="}, template=True)
    assert "'/models/downloaded-7b'" in str(info.value)
    assert "model.chat_template=none" in str(info.value)
    assert time.perf_counter() - start < 5  # (each stops in well under a second)


def test_a_template_cannot_reach_past_the_sandbox(char_tokenizer):
    from payoff.models.chat import render_chat

    char_tokenizer.chat_template = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(ConfigError, match="SecurityError|UndefinedError"):
        render_chat(char_tokenizer, [{"role": "user", "content": "hi"}])
    char_tokenizer.chat_template = "{% set ns = namespace(_x=1) %}"
    with pytest.raises(ConfigError, match="may not start with '_'"):
        render_chat(char_tokenizer, [{"role": "user", "content": "hi"}])
