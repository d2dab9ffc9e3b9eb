"""Prompt-only rows (TRL's GRPO datasets with a reward that needs no reference): read, trained
on by GRPO and PPO-RLHF with the user's rewards, evaluated by mean reward; refused, with the
reason, where an answer is needed (SFT, the tiny base model, best-of-N, no rewards)."""

from __future__ import annotations

import json

import pytest

from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks import TaskConfig, make_task
from payoff.envs.tasks.jsonl import read_rows

pytest.importorskip("transformers", reason="the llm extra is not installed")

PROMPTS = [{"prompt": f"{a}+{b}="} for a in range(10) for b in range(10)]


def sevens(prompts, completions, **columns):
    """A reward that needs no reference: the share of the completion's characters that are 7."""
    return [c.count("7") / max(len(c), 1) for c in completions]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """An untrained tiny model: prompt-only rows cannot pretrain payoff's base model."""
    from payoff.models.lm import ModelConfig, load_lm, save_lm

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("fresh") / "model"))


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prompt_only_rows_are_read_and_have_no_default_reward(tmp_path):
    rows = read_rows(_jsonl(tmp_path / "p.jsonl", PROMPTS[:3]))
    assert [r["prompt"] for r in rows] == ["0+0=", "0+1=", "0+2="]
    assert all("answer" not in r for r in rows)
    task = make_task(TaskConfig.from_value(PROMPTS))
    assert not task.has_references and task.default_rewards == ()
    assert task.test_rows and task.train_rows  # 10% held out by a hash of each prompt
    assert make_task(TaskConfig(name="addition")).has_references


def test_rows_with_and_without_answers_do_not_mix(tmp_path):
    mixed = _jsonl(tmp_path / "m.jsonl", [{"prompt": "1+1="}, {"prompt": "2+2=", "answer": "4"}])
    with pytest.raises(
        DataError,
        match=r"m.jsonl:2: has a reference .* the first row has none.*columns: \['answer', 'prompt'\]",
    ):
        read_rows(mixed)
    answered = _jsonl(tmp_path / "a.jsonl", [{"prompt": "2+2=", "answer": "4"}])
    prompts = _jsonl(tmp_path / "p.jsonl", PROMPTS[:5])
    with pytest.raises(DataError, match="test rows of .* lack reference answers"):
        make_task(TaskConfig(name="jsonl", data=str(answered), test_data=str(prompts)))
    with pytest.raises(DataError, match="test rows of .* have reference answers"):
        make_task(TaskConfig(name="jsonl", data=str(prompts), test_data=str(answered)))


def test_grpo_learns_from_prompt_only_rows_by_the_users_reward(model_dir):
    """Measured (seed 0): greedy held-out reward 0.0 before, 1.0 after 10 steps."""
    from payoff import GRPO

    grpo = GRPO(
        task=PROMPTS,
        rewards=[sevens],
        model={"path": model_dir},
        steps=20,
        prompts_per_step=8,
        group_size=8,
        max_new_tokens=4,
        eval_every=10,
        final_eval_k=[1],
    )
    before = grpo.evaluate(20, k=(1, 4))
    assert before.accuracy is None and before.pass_at == {} and before.mean_reward < 0.2
    assert "mean reward" in before.line() and "no accuracy" in before.line()
    grpo.learn()
    after = grpo.evaluate(20)
    assert after.mean_reward > 0.8, after.line()
    assert all("train/accuracy" not in r for r in grpo.history)
    assert [r["eval/reward"] for r in grpo.history if "eval/reward" in r][-1] > 0.8
    assert set(after.examples[0]) == {"prompt", "completion", "reward"}


def test_rlhf_ppo_trains_prompt_only_rows_without_a_gold_score(model_dir):
    from payoff.algos.rlhf_ppo import RLHFPPO

    ppo = RLHFPPO(
        model={"path": model_dir},
        rewards=[sevens],
        task=TaskConfig.from_value(PROMPTS),
        steps=2,
        prompts_per_step=8,
        minibatch_size=8,
        eval_every=2,
    ).learn()
    assert any("eval/proxy" in r for r in ppo.history)
    assert all("reward/gold" not in r and "eval/gold" not in r for r in ppo.history)
    assert ppo.greedy_scores()[1] is None
    assert ppo.evaluate(8).accuracy is None and "mean reward" in ppo.evaluate(8).line()


def test_what_needs_an_answer_says_so(model_dir):
    from payoff import GRPO, SFT
    from payoff.algos.best_of_n import BestOfN

    with pytest.raises(ConfigError, match=r"no verifier to reward with: give rewards="):
        GRPO(task=PROMPTS, model={"path": model_dir})
    with pytest.raises(ConfigError, match=r"cannot pretrain its tiny base model.*model.path="):
        GRPO(task=PROMPTS, rewards=[sevens])
    with pytest.raises(ConfigError, match="sft learns each row's answer"):
        SFT(task=PROMPTS, model={"path": model_dir})
    with pytest.raises(ConfigError, match="best-of-N measures the proxy's pick against"):
        BestOfN(task=TaskConfig.from_value(PROMPTS), model={"path": model_dir})


def test_run_must_be_a_run_not_a_folder_name():
    from payoff import PPO

    with pytest.raises(ConfigError, match=r"run= takes a payoff.track.run.Run, got str 'runs/x'"):
        PPO("CartPole-v1", run="runs/x")
