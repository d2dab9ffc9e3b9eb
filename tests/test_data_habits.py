"""What TRL and SB3 users bring: DataFrames and Parquet files of chat rows, runs evaluated
from another folder, and SAC/TD3 learning-rate schedules (issue 62, items 5, 6 and 10)."""

from __future__ import annotations

import json

import pytest

from payoff.core.errors import DataError


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A freshly initialised tiny Llama saved as a Hugging Face folder (no base model built)."""
    from payoff.algos.sft import SFT

    folder = tmp_path_factory.mktemp("tiny")
    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10)]
    return str(SFT(task=rows, steps=1).save_model(folder / "model"))


def _chat(role, text):
    return [{"role": role, "content": text}]


def _parquet(frame, path):
    """`frame` after a Parquet round trip: chat columns come back as NumPy arrays of dicts."""
    import pandas as pd

    frame.to_parquet(path)
    return pd.read_parquet(path)


# ---- item 5: DataFrames, Parquet and datasets of chat rows ---------------------------------
def test_conversational_dataframes_read_from_parquet_train_every_data_algorithm(
    tiny_model, tmp_path
):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from payoff import DPO, GRPO, SFT
    from payoff.algos.reward_model import RewardModel

    model = {"path": tiny_model}
    pairs = pd.DataFrame(
        [
            {
                "prompt": _chat("user", f"{a}+{a}="),
                "chosen": _chat("assistant", str(2 * a)),
                "rejected": _chat("assistant", str(2 * a + 1)),
            }
            for a in range(20)
        ]
    )
    read = _parquet(pairs, tmp_path / "pairs.parquet")
    assert not isinstance(read["chosen"][0], list)  # what pandas gives: an array of dicts
    expected = {"prompt": "user: 0+0=\nassistant: ", "chosen": "0", "rejected": "1"}
    dpo = DPO(model=model, preferences=read, steps=1, batch_size=4, eval_every=0)
    assert {k: dpo.train_rows[0][k] for k in expected} == expected
    assert dpo.train_rows[0]["prompt_messages"] == [{"role": "user", "content": "0+0="}]
    dpo.learn()
    assert dpo.step == 1
    assert RewardModel(model=model, preferences=read, steps=1).train_rows[0]["chosen"] == "0"
    # the Parquet file itself, and a datasets.Dataset made from the DataFrame, read alike
    from payoff.envs.tasks.preferences import read_preferences

    assert read_preferences(str(tmp_path / "pairs.parquet")) == read_preferences(read)
    datasets = pytest.importorskip("datasets")
    assert read_preferences(datasets.Dataset.from_pandas(read)) == read_preferences(read)

    conversations = pd.DataFrame(
        [
            {"messages": _chat("user", f"{a}+{a}=") + _chat("assistant", str(2 * a))}
            for a in range(20)
        ]
    )
    sft = SFT(model=model, task=_parquet(conversations, tmp_path / "sft.parquet"), steps=1)
    row = sft.task.train_rows[0]
    assert (row["prompt"], row["answer"]) == ("user: 0+0=\nassistant: ", "0")

    # GRPO: conversational prompts; a list column reaches reward functions as a list
    problems = pd.DataFrame(
        [
            {"prompt": _chat("user", f"{a}+{a}="), "answer": str(2 * a), "tags": ["sum", str(a)]}
            for a in range(20)
        ]
    )
    grpo = GRPO(model=model, task=_parquet(problems, tmp_path / "grpo.parquet"), steps=1)
    row = grpo.task.train_rows[0]
    assert row["prompt"] == "user: 0+0=\nassistant: " and row["tags"] == ["sum", "0"]
    assert row["prompt_messages"] == [{"role": "user", "content": "0+0="}]
    json.dumps(grpo.task.train_rows)  # plain data all through: no NumPy values left


def test_a_malformed_chat_cell_from_a_dataframe_names_its_row_and_column(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from payoff.envs.tasks.preferences import PreferenceDataConfig, read_preferences

    rows = [
        {
            "prompt": _chat("user", "1+1="),
            "chosen": _chat("assistant", "2"),
            "rejected": _chat("assistant", "3"),
        },
        {
            "prompt": _chat("user", "2+2="),
            "chosen": [{"role": "assistant", "content": None}],
            "rejected": _chat("assistant", "5"),
        },
    ]
    frame = _parquet(pd.DataFrame(rows), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"rows\[1\]: column 'chosen', message 0: needs string"):
        read_preferences(PreferenceDataConfig.from_value(frame).dataset)  # as DPO(preferences=)


# ---- item 6: a run's data paths are saved absolute -------------------------------------------
def test_a_run_given_relative_paths_is_evaluated_from_another_folder(
    tiny_model, tmp_path, monkeypatch
):
    import shutil

    import yaml

    from payoff.algos.dpo import DPO
    from payoff.cli import main
    from payoff.track.run import Run

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    shutil.copytree(tiny_model, work / "model")
    pairs = [
        {"prompt": f"{a}+{a}=", "chosen": str(2 * a), "rejected": str(2 * a + 1)} for a in range(12)
    ]
    for name, rows in (("pairs.jsonl", pairs[:8]), ("held.jsonl", pairs[8:])):
        (work / name).write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.chdir(work)
    run = Run.create(tmp_path / "runs", "dpo", {"algo": "dpo"})
    preferences = {"path": "pairs.jsonl", "test_path": "held.jsonl"}
    DPO(model={"path": "model"}, preferences=preferences, steps=1, batch_size=4, run=run).learn()
    run.close()
    saved = yaml.safe_load((run.path / "config.yaml").read_text())
    assert saved["preferences"]["test_path"] == str(work / "held.jsonl")
    assert saved["preferences"]["path"] == str(work / "pairs.jsonl")
    assert saved["model"]["path"] == str(work / "model")
    monkeypatch.chdir(elsewhere)
    assert main(["eval", str(run.path)]) == 0


def test_payoff_train_finds_a_test_path_beside_its_recipe(tmp_path, monkeypatch):
    from payoff.train import resolve

    (tmp_path / "exp").mkdir()
    for name in ("pairs.jsonl", "held.jsonl"):
        (tmp_path / "exp" / name).write_text('{"prompt": "1+1=", "chosen": "2", "rejected": "3"}\n')
    recipe = tmp_path / "exp" / "mine.yaml"
    recipe.write_text(
        "algo: reward_model\npreferences: {path: pairs.jsonl, test_path: held.jsonl}\n"
    )
    monkeypatch.chdir(tmp_path)  # the project root: the recipe's files are beside it
    _, config, resolved = resolve(str(recipe))
    assert config.preferences.test_path == str(tmp_path / "exp" / "held.jsonl")
    assert resolved["preferences"]["test_path"] == str(tmp_path / "exp" / "held.jsonl")


# ---- item 10: the off-policy family takes a learning-rate schedule ------------------------------
TINY_OFF_POLICY = {
    "total_steps": 400,
    "learning_starts": 100,
    "batch_size": 32,
    "hidden": [16],
    "log_every": 100,
    "num_envs": 1,
}


@pytest.mark.parametrize("name", ["SAC", "TD3"])
def test_sac_and_td3_anneal_their_learning_rate_and_log_it(name, tmp_path):
    import payoff

    cls = getattr(payoff, name)
    agent = cls("Pendulum-v1", learning_rate={"start": 1e-3, "end": 1e-4}, **TINY_OFF_POLICY)
    agent.learn()
    logged = [r["train/learning_rate"] for r in agent.history if "train/learning_rate" in r]
    assert len(logged) >= 3 and all(a > b for a, b in zip(logged, logged[1:], strict=False))
    assert logged[0] <= 1e-3 and logged[-1] == pytest.approx(1e-4)
    # every optimizer (actor, critics, SAC's temperature) at the schedule's value for the end
    end = agent.config.learning_rate(agent.step / agent.config.total_steps)
    assert end == pytest.approx(1e-4)
    assert {optimizer.lr for optimizer in agent.optimizers()} == {end}
    assert len(agent.optimizers()) == (3 if name == "SAC" else 2)
    # a checkpoint keeps the step size, and a resumed run recomputes it from its step
    again = cls.load(agent.save(tmp_path / "agent.safetensors"))
    assert {optimizer.lr for optimizer in again.optimizers()} == {end}
    plain = cls("Pendulum-v1", learning_rate=5e-4, **{**TINY_OFF_POLICY, "total_steps": 200})
    plain.learn()
    assert {optimizer.lr for optimizer in plain.optimizers()} == {5e-4}
    assert {r["train/learning_rate"] for r in plain.history if "train/learning_rate" in r} == {5e-4}


def test_dqn_takes_the_same_learning_rate_schedule():
    from payoff import DQN

    agent = DQN(
        "CartPole-v1", learning_rate={"start": 1e-3, "end": 0.0, "fraction": 0.5}, **TINY_OFF_POLICY
    )
    agent.learn()
    assert agent.optimizer.lr == 0.0  # annealed to its end by half of training
    logged = [r["train/learning_rate"] for r in agent.history if "train/learning_rate" in r]
    assert logged[0] > logged[-1] == 0.0
