"""An agent task of your own (`task.name: module:Class`): your tools, problems and
demonstrations, through the same trainer as the shipped tasks."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from payoff.core.errors import ConfigError, EnvError
from payoff.core.imports import names_from
from payoff.envs.text.formats import PlainFormat
from payoff.envs.text.tasks import AgentTaskConfig, make_agent_task
from payoff.models.tokenizer import build_char_tokenizer
from payoff.rollout.episodes import replay_episode

# A user's module: a `lookup` tool over a small table, questions answered by calling it.
USER_TASKS = """
import numpy as np

from payoff.envs.text import Tool, ToolEnv, ToolInputError
from payoff.envs.text.tasks import answer_turn, tool_turn

PRICES = {"apple": 3, "pear": 5, "plum": 2, "fig": 7, "kiwi": 4, "lime": 1}


def lookup(item):
    if item not in PRICES:
        raise ToolInputError(f"no item {item!r}; items: {sorted(PRICES)}")
    return {"item": item, "price": PRICES[item]}


class PriceTask:
    def __init__(self, config):
        self.config = config

    def make_env(self):
        tool = Tool(
            "lookup",
            "The price of an item.",
            {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            lookup,
        )
        return ToolEnv([tool], self.config.max_turns, self.config.max_tokens)

    def sample(self, rng, n):
        items = sorted(PRICES)
        chosen = [items[int(rng.integers(len(items)))] for _ in range(n)]
        return [{"question": f"price of {i}?", "answer": str(PRICES[i]), "item": i} for i in chosen]

    def demonstration(self, task, rng):
        return [tool_turn("lookup", item=task["item"]), answer_turn(task["answer"])]

    def group(self, task):
        return "fruit"


class NoSample:
    def __init__(self, config):
        pass

    def make_env(self):
        return None

    def demonstration(self, task, rng):
        return []


class BadRows(PriceTask):
    def sample(self, rng, n):
        return [{"prompt": "x"}] * n
"""


@pytest.fixture
def user_tasks(tmp_path, monkeypatch):
    """user_tasks.py in the working folder, importable as payoff imports a user's module."""
    (tmp_path / "user_tasks.py").write_text(textwrap.dedent(USER_TASKS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("user_tasks", None)


def test_your_own_task_samples_and_its_demonstrations_replay(user_tasks):
    task = make_agent_task(AgentTaskConfig(name="user_tasks:PriceTask", max_turns=3))
    rng = np.random.default_rng(0)
    problems = task.sample(rng, 8)
    tokenizer = build_char_tokenizer()
    for problem in problems:
        episode = replay_episode(
            task.make_env(), problem, task.demonstration(problem, rng), PlainFormat(), tokenizer
        )
        assert episode.success and episode.reward == 1.0
        assert episode.info["tool_calls"] == {"lookup": 1}
    assert {task.group(p) for p in problems} == {"fruit"}
    env = task.make_env()
    env.reset(problems[0])
    result = env.step('<tool>{"name": "lookup", "arguments": {"item": "durian"}}</tool>')
    assert "no item 'durian'" in result.observation[0]["content"]
    assert result.info["malformed"] == 1  # ToolInputError: the model's mistake


def test_your_own_task_is_checked_where_it_goes_wrong(user_tasks):
    with pytest.raises(ConfigError, match=r"has no sample: a task needs make_env\(\)"):
        make_agent_task(AgentTaskConfig(name="user_tasks:NoSample"))
    bad = make_agent_task(AgentTaskConfig(name="user_tasks:BadRows"))
    with pytest.raises(EnvError, match="'question' and 'answer' keys, got \\['prompt'\\]"):
        bad.sample(np.random.default_rng(0), 2)
    with pytest.raises(ConfigError, match="has no 'Missing'"):
        make_agent_task(AgentTaskConfig(name="user_tasks:Missing"))
    with pytest.raises(ConfigError, match="valid: \\['calculator', 'doc-search'\\], or a task"):
        AgentTaskConfig(name="calculater").validate()


def test_a_loaded_run_naming_your_task_imports_it_only_when_trusted(user_tasks):
    with names_from("downloaded/run"), pytest.raises(ConfigError, match="--trust-code"):
        make_agent_task(AgentTaskConfig(name="user_tasks:PriceTask"))
    assert "user_tasks" not in sys.modules  # refused before the import ran its code


@pytest.mark.slow
def test_agent_grpo_trains_on_your_own_task(user_tasks, tmp_path, monkeypatch):
    """The whole trainer on a user's task: demonstration SFT of the tiny model on the task's
    own demonstrations, GRPO steps, greedy evaluation with the task's groups. Measured
    (seed 0, 32 held-out problems, ~14 s): the SFT base answers 32 of 32 through the user's
    tool (1.0 success, 1.0 calls, 0 malformed) and 2 GRPO steps at lr 1e-4 keep it there; a
    32-wide, 1-layer base on the same data reached 0.25. Turns need max_new_tokens >= the
    longest demonstrated turn (57 characters here): at 48 every call was cut, all malformed."""
    from payoff.algos.agent_grpo import AgentGRPO

    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path / "cache"))
    agent = AgentGRPO(
        task={"name": "user_tasks:PriceTask", "max_turns": 3, "max_tokens": 160, "eval_size": 32},
        sft={
            "demonstrations": 128,
            "steps": 300,
            "batch_size": 16,
            "learning_rate": 0.003,
            "tiny": {"hidden_size": 64, "layers": 2, "intermediate_size": 128},
        },
        steps=2,
        tasks_per_step=4,
        group_size=2,
        max_new_tokens=72,
        eval_every=2,
        learning_rate=1e-4,
    )
    agent.learn()
    evals = [r for r in agent.history if "eval/success" in r]
    assert [r["step"] for r in evals] == [0, 2] and "eval/success_fruit" in evals[-1]
    for scores in evals:
        assert scores["eval/success"] >= 0.9, scores
        assert scores["eval/calls/lookup"] >= 0.9 and scores["eval/malformed"] <= 0.1, scores


def test_episode_metrics_count_tool_errors_and_episodes_cut_at_a_limit():
    from payoff.envs.text import Tool, ToolEnv
    from payoff.rollout.episodes import episode_metrics

    def broken(x):
        raise RuntimeError("down")

    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    env = ToolEnv([Tool("t", "", schema, broken)], max_turns=2)
    call = '<tool>{"name": "t", "arguments": {"x": "a"}}</tool>'
    tokenizer = build_char_tokenizer()
    cut = replay_episode(
        env, {"question": "q", "answer": "1"}, [call, call], PlainFormat(), tokenizer
    )
    answered = replay_episode(
        env, {"question": "q", "answer": "1"}, ["<answer>1</answer>"], PlainFormat(), tokenizer
    )
    metrics = episode_metrics([cut, answered], prefix="eval/")
    assert metrics["eval/tool_errors"] == 1.0 and metrics["eval/malformed"] == 0.0
    assert metrics["eval/cut_at_limit"] == 0.5 and metrics["eval/success"] == 0.5


def test_demonstrations_that_would_teach_the_wrong_thing_are_named(user_tasks, capsys):
    from payoff.algos.agent_grpo import warn_about_demonstrations

    task = make_agent_task(AgentTaskConfig(name="user_tasks:PriceTask", max_turns=3))
    rng = np.random.default_rng(0)
    tokenizer = build_char_tokenizer()
    problems = task.sample(rng, 3)
    good = [
        replay_episode(task.make_env(), p, task.demonstration(p, rng), PlainFormat(), tokenizer)
        for p in problems
    ]
    warn_about_demonstrations(good, 72, "user_tasks:PriceTask")
    assert capsys.readouterr().err == ""
    wrong_name = '<tool>{"name":"lookup","arguments":{"name":"fig"}}</tool>'
    bad = [
        replay_episode(task.make_env(), problems[0], [wrong_name], PlainFormat(), tokenizer),
        replay_episode(
            task.make_env(),
            problems[1],
            task.demonstration(problems[1], rng)[:1],
            PlainFormat(),
            tokenizer,
        ),
    ]
    warn_about_demonstrations(good + bad, 48, "user_tasks:PriceTask")
    err = capsys.readouterr().err
    assert "of 5 demonstrations, 2 end without an answer turn" in err
    assert "1 make calls the env rejects as malformed" in err
    assert "longer than max_new_tokens 48" in err


def test_the_sft_cache_key_follows_the_task_code(user_tasks, tmp_path, monkeypatch):
    from payoff.envs.text.tasks import task_code

    before = task_code("user_tasks:PriceTask")
    (tmp_path / "user_tasks.py").write_text(
        (tmp_path / "user_tasks.py").read_text() + "\n# edited\n"
    )
    assert len(before) == 16 and task_code("user_tasks:PriceTask") != before
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None)  # as in a script or notebook
    assert task_code("__main__:Task") == "" and task_code("calculator") == ""
    package = tmp_path / "pkg_tasks"
    package.mkdir()
    (package / "__init__.py").write_text("from .impl import Task\n")
    (package / "impl.py").write_text("class Task: pass\n")
    first = task_code("pkg_tasks:Task")
    (package / "impl.py").write_text("class Task:\n    pass\n")
    assert first and task_code("pkg_tasks:Task") != first  # a module inside the package counts
