"""`payoff train ALGO key=value ...`: an algorithm's defaults with the env or task given by
keys, titled by the algorithm and what it trains on, not by a borrowed recipe (issue 62)."""

from __future__ import annotations

import json

import pytest
import yaml

from payoff.cli import main
from payoff.recipes import list_recipes
from payoff.train import resolve, train


def _only_run(out):
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _config(run_dir):
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def test_ppo_by_name_is_titled_by_its_env_and_resumes(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = [
        "train",
        "ppo",
        "env.id=Acrobot-v1",
        "env.max_episode_steps=20",  # short episodes: a cheap final evaluation and GIF
        "total_steps=256",
        "num_envs=2",
        "num_steps=64",
        "final_eval_episodes=2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    run = _only_run(out)
    assert run.name.endswith("-ppo-Acrobot-v1")
    config = _config(run)
    assert config["description"] == "ppo on Acrobot-v1"
    assert config["algo"] == "ppo" and config["from_defaults"] is True
    assert "recipe" not in config  # no recipe's description borrowed
    assert config["env"]["id"] == "Acrobot-v1" and config["num_envs"] == 2
    report = (run / "media" / "report.html").read_text()
    assert "ppo on Acrobot-v1" in report and "CartPole" not in report.split("<h2>Config")[0]
    assert "ppo's defaults, no recipe" in report

    capsys.readouterr()
    assert main(["train", "--resume", str(run), "total_steps=384", "--no-media"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished_step"] >= 384
    assert _config(run)["from_defaults"] is True  # still the algorithm's run
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "Acrobot-v1" in capsys.readouterr().out


def test_dqn_from_python_and_qlearning_from_the_cli(tmp_path):
    run = train(
        "dqn",
        ["env.id=Acrobot-v1", "env.max_episode_steps=20", "total_steps=256"],
        out=tmp_path / "dqn",
        media=False,
    )
    assert run.path.name.endswith("-dqn-Acrobot-v1")
    assert run.config["description"] == "dqn on Acrobot-v1"
    assert run.config["final_eval_episodes"] > 0  # a `payoff train` run's final evaluation
    assert run.summary()["finished_step"] == 256

    out = tmp_path / "q"
    argv = ["train", "qlearning", "env.id=Taxi-v4", "total_episodes=20", "final_eval_episodes=2"]
    assert main([*argv, "--out", str(out), "--no-media"]) == 0
    config = _config(_only_run(out))
    assert config["description"] == "qlearning on Taxi-v4"
    assert config["total_episodes"] == 20 and config["env"]["id"] == "Taxi-v4"


def test_names_resolve_file_then_recipe_then_algorithm(tmp_path, monkeypatch, capsys):
    # hyphens and capitals as users write them; the defaults' env is used and said
    cls, config, resolved = resolve("recurrent-ppo", ["env.id=Acrobot-v1"])
    assert cls.name == "recurrent_ppo" and resolved["description"] == "recurrent_ppo on Acrobot-v1"
    assert "recipe_note" not in resolved
    cls, config, resolved = resolve("PPO")
    assert resolved["description"] == f"ppo on {config.env.id}"
    assert config.env.id in resolved["recipe_note"] and "env.id=" in resolved["recipe_note"]
    # a recipe's name is a recipe, not its algorithm's defaults
    _, config, resolved = resolve("cartpole-ppo")
    assert resolved["recipe"] == "cartpole-ppo" and config.num_envs == 64
    # a file of that name wins over the algorithm
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ppo").write_text("description: mine\nalgo: dqn\nenv: {id: Acrobot-v1}\n")
    cls, _, resolved = resolve("ppo")
    assert cls.name == "dqn" and resolved["description"] == "mine"

    assert main(["recipes"]) == 0
    listed = capsys.readouterr().out
    assert "payoff train ppo env.id=Acrobot-v1" in listed and "recurrent_ppo" in listed
    assert len(listed.splitlines()) > len(list_recipes())
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "an algorithm, from its defaults" in capsys.readouterr().out


def test_sft_on_your_rows_uses_the_tiny_model(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
            for a in range(10)
            for b in range(4)
        )
    )
    out = tmp_path / "runs"
    argv = ["train", "sft", f"task.data={rows}", "steps=2", "batch_size=4", "max_new_tokens=2"]
    assert main([*argv, "task.eval_size=4", "--out", str(out), "--no-media"]) == 0
    run = _only_run(out)
    config = _config(run)
    assert run.name.endswith("-sft-rows.jsonl")
    assert config["description"] == "sft on rows.jsonl"
    assert config["model"]["path"] == ""  # payoff's tiny Llama
    assert config["task"]["name"] == "jsonl" and config["task"]["data"] == str(rows)
    assert json.loads((run / "summary.json").read_text())["finished_step"] == 2


def test_unknown_name_lists_recipes_and_algorithms(tmp_path, capsys):
    assert main(["train", "ppp", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe or algorithm 'ppp'" in err and "Did you mean 'ppo'" in err
    assert "cartpole-ppo" in err and "recurrent_ppo" in err and "sft" in err
    assert not any(tmp_path.iterdir())


def test_an_algorithm_that_needs_a_key_says_which(tmp_path, capsys):
    # bc's defaults imitate payoff's kart driver: on CartPole it needs another expert
    assert main(["train", "bc", "env.id=CartPole-v1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "expert=" in err and "payoff train bc env.id=CartPole-v1 expert=cartpole" in err
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


def test_ippo_defaults_build():
    pytest.importorskip("mpe2")
    cls, config, _ = resolve("ippo")
    assert config.num_envs % 3 == 0  # a vector slot per agent of simple_spread's three
    agent = cls(config=config)
    assert agent.config.num_envs == config.num_envs
