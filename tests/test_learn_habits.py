"""learn() as an SB3 user calls it (issue #62, items 2 and 4): it trains n steps and
evaluates only when asked (`payoff train` runs keep their evaluations), takes callbacks,
and raises KeyboardInterrupt when a stop signal ended it, after its checkpoint."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from payoff import PPO, SAC, SFT
from payoff.algos.agent import Agent
from payoff.algos.base import NO_FINAL_EVALUATION
from payoff.algos.loop import LearnInterrupted
from payoff.algos.shared.lm import LMAlgorithm
from payoff.core.errors import ConfigError
from payoff.track.run import Run

TINY_PPO = {"num_envs": 2, "num_steps": 64, "minibatch_size": 64, "epochs": 1}


@pytest.fixture
def evaluations(monkeypatch) -> list[int]:
    """Counts the evaluation calls every agent and language model makes (periodic, final)."""
    calls: list[int] = []
    for cls in (Agent, LMAlgorithm):
        original = cls.evaluate

        def counted(self, *args, _original=original, **kwargs):
            calls.append(self.step)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "evaluate", counted)
    return calls


def _evaluated(history: list[dict[str, Any]]) -> list[str]:
    return sorted({k for r in history for k in r if k.startswith(("eval/", "final/"))})


# ---- learn(n) trains n steps and nothing else -------------------------------------------
def test_ppo_learn_from_python_plays_no_evaluation_episodes(evaluations):
    """It played a 50-episode final evaluation nobody asked for (CarRacing: minutes)."""
    agent = PPO("CartPole-v1").learn(256)
    assert agent.step >= 256 and evaluations == [] and _evaluated(agent.history) == []
    assert agent.config.final_eval_episodes == 0 and agent.config.eval_every == 0


def test_sac_evaluates_only_when_asked(evaluations):
    """SAC/TD3 evaluated every 5,000 steps by default (and 50 episodes at the end)."""
    quick = {"learning_starts": 64, "batch_size": 32, "hidden": [16]}
    agent = SAC("Pendulum-v1", **quick).learn(128)
    assert agent.config.eval_every == 0 and evaluations == []
    asked = SAC("Pendulum-v1", eval_every=64, eval_episodes=1, final_eval_episodes=1, **quick)
    asked.learn(128)
    assert evaluations == [64, 128, 128]  # two periodic, one final
    assert _evaluated(asked.history)[:2] == ["eval/mean_return", "eval/std_return"]


def test_an_sft_run_made_in_python_generates_nothing_for_evaluation(tmp_path, evaluations):
    """SFT evaluated at its last step and again at the end: generation passes it never
    needed to train."""
    run = Run.create(tmp_path, "sft", {"algo": "sft"})
    sft = SFT(config=None, run=run, steps=2, batch_size=8, task={"eval_size": 4}).learn()
    run.close()
    assert evaluations == [] and _evaluated(run.records()) == []
    summary = run.summary()
    # said first, so `payoff train` prints it as it is, not as "final evaluation: ..."
    assert "final_eval" not in summary and summary["final_line"] == (
        NO_FINAL_EVALUATION.format("final_eval=false") + "; trained 2 steps"
    )
    assert sft.step == 2 and (run.path / "model" / "model.safetensors").is_file()


def test_a_language_model_run_evaluates_its_last_step_once(tmp_path, evaluations):
    """The periodic evaluation at the last step is the final one: a real model's greedy
    pass costs minutes, and finish() ran it again on the same weights."""
    run = Run.create(tmp_path, "sft", {"algo": "sft"})
    SFT(
        config=None,
        run=run,
        steps=2,
        batch_size=8,
        eval_every=1,
        final_eval=True,
        task={"eval_size": 4},
    ).learn()
    run.close()
    assert evaluations == [1, 2]  # no second pass at step 2
    final = run.summary()["final_eval"]
    last = [r["eval/accuracy"] for r in run.records() if "eval/accuracy" in r][-1]
    assert final["accuracy"] == last


def test_a_stop_condition_without_evaluations_is_refused():
    """stop_at_return is checked at each evaluation: with them off it would never stop."""
    with pytest.raises(ConfigError, match="stop_at_return=475.0 is checked at each periodic"):
        PPO("CartPole-v1", stop_at_return=475)
    PPO("CartPole-v1", stop_at_return=475, eval_every=10_000)
    PPO("CartPole-v1", stop_at_return=475, eval_every=0)  # given: a choice, as in a recipe
    # the example is in the trainer's own units: SFT counts optimizer steps, evaluates at 100
    with pytest.raises(ConfigError, match=r"eval_every=100, in optimizer steps"):
        SFT(stop_at_accuracy=0.9)


# ---- payoff train runs keep their evaluations -------------------------------------------
@pytest.mark.parametrize(
    ("recipe", "expected"),
    [
        ("cartpole-ppo", {"final_eval_episodes": 50, "eval_every": 8192}),
        ("pendulum-sac", {"final_eval_episodes": 50, "eval_every": 2000}),
        ("frozenlake-q", {"final_eval_episodes": 1000, "eval_every": 1000}),
        ("kart-dagger", {"final_eval_episodes": 100, "eval_every": 4}),
        ("tictactoe-alphazero", {"final_eval_games": 100, "eval_games": 20, "eval_every": 5}),
        ("prefs-dpo", {"final_eval": True, "eval_every": 25}),
        ("arithmetic-grpo", {"final_eval": True, "eval_every": 50}),
    ],
)
def test_recipes_resolve_with_the_evaluations_they_had(recipe, expected):
    """The values each recipe resolved to before evaluation went off in Python (read from
    the recipe where it sets them, else the old class defaults)."""
    from payoff.train import resolve

    _, config, resolved = resolve(recipe)
    for key, value in expected.items():
        assert getattr(config, key) == value == resolved[key], key


def test_a_recipe_run_has_its_final_evaluation_and_zero_turns_it_off(tmp_path):
    from payoff.report.page import write_report
    from payoff.train import _final_line, train

    run = train("frozenlake-q", ["total_episodes=30"], out=tmp_path / "a", media=False)
    assert run.summary()["final_eval"]["episodes"] == 1000  # the run default
    off = train(
        "frozenlake-q",
        ["total_episodes=30", "final_eval_episodes=0"],  # refused before: "must be > 0"
        out=tmp_path / "b",
        media=False,
    )
    summary = off.summary()
    assert "final_eval" not in summary
    line = NO_FINAL_EVALUATION.format("final_eval_episodes=0")
    assert summary["final_line"] == line and summary["finished"]
    assert not any(k.startswith("final/") for r in off.records() for k in r)
    assert _final_line(off, "q") == f"q (seed 0): {line}"
    assert line in write_report(off).read_text()


# ---- callbacks ----------------------------------------------------------------------------
def test_a_callback_gets_each_log_and_false_stops_at_that_step():
    calls: list[tuple[Any, dict[str, Any]]] = []

    def third_stops(algorithm, metrics):
        calls.append((algorithm, metrics))
        return False if len(calls) == 3 else None

    agent = PPO("CartPole-v1", **TINY_PPO)
    assert agent.learn(4096, callback=third_stops) is agent
    assert [a for a, _ in calls] == [agent] * 3
    steps = [m["step"] for _, m in calls]  # (PPO counts env steps less autoresets)
    assert 0 < steps[0] < steps[1] < steps[2] == agent.step < 1024  # not 4,096
    assert calls[-1][1] == agent.history[-1]  # what was just logged, "step" included
    assert "train/approx_kl" in calls[-1][1]
    agent.learn(128)  # it trains on from there
    assert agent.step >= steps[2] + 128


def test_a_list_of_callbacks_each_called_and_none_or_true_goes_on():
    seen: dict[str, list[int]] = {"a": [], "b": []}
    agent = PPO("CartPole-v1", **TINY_PPO, log_every=256)
    agent.learn(
        1024,
        callback=[
            lambda algo, m: seen["a"].append(m["step"]),  # None
            lambda algo, m: seen["b"].append(m["step"]) or True,
        ],
        progress_bar=False,
        reset_num_timesteps=False,
    )
    assert seen["a"] == seen["b"] and len(seen["a"]) == 4  # every 256 steps, and the end
    assert seen["a"][-1] == agent.step >= 1024


class SB3Callback:
    """What Stable-Baselines3's BaseCallback looks like from outside."""

    def _on_step(self) -> bool:
        return True

    def on_step(self) -> bool:
        return self._on_step()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"callback": 3}, r"takes a function fn\(algorithm, metrics\) or a list .* got int 3"),
        ({"callback": [print, "x"]}, r"got str 'x'"),
        ({"callback": SB3Callback()}, r"Stable-Baselines3 callback object \(SB3Callback\)"),
        ({"callback": lambda metrics: None}, r"cannot be called with two arguments"),
        ({"reset_num_timesteps": True}, r"counters always go on"),
        ({"log_interval": 4}, r"got log_interval\. Logging and evaluation are config keys"),
        ({"tb_log_name": "x"}, r"got tb_log_name"),
        ({"progress_bar": "no"}, r"progress_bar=\.\.\.\) takes True or False"),
    ],
)
def test_what_learn_refuses_says_what_it_takes(arguments, message):
    agent = PPO("CartPole-v1", **TINY_PPO)
    with pytest.raises(ConfigError, match=message):
        agent.learn(128, **arguments)
    assert agent.step == 0


def test_a_callback_that_raises_leaves_the_checkpoint_at_its_step(tmp_path):
    run = Run.create(tmp_path, "cb", {"algo": "ppo"})
    agent = PPO("CartPole-v1", run=run, **TINY_PPO, checkpoint_every=10_000)

    steps: list[int] = []

    def fails(algorithm, metrics):
        steps.append(metrics["step"])
        if len(steps) == 2:
            raise ValueError("my callback's bug")

    with pytest.raises(ValueError, match="my callback's bug"):
        agent.learn(1024, callback=fails)
    payload, _ = run.load_checkpoint("ppo")
    assert payload["state"]["loop"]["step"] == steps[1] == agent.step < 1024


# ---- a stop signal raises -----------------------------------------------------------------
def test_a_real_sigint_during_learn_raises_after_the_checkpoint(tmp_path):
    """A Ctrl-C made learn() return as if done: the script went on to save a half-trained
    agent. The signal here is a real one, sent to this process from a callback."""
    run = Run.create(tmp_path, "stopped", {"algo": "ppo"})
    agent = PPO("CartPole-v1", run=run, **TINY_PPO, checkpoint_every=10_000)

    steps: list[int] = []

    def ctrl_c(algorithm, metrics):
        steps.append(metrics["step"])
        if len(steps) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt) as stopped:
        agent.learn(2048, callback=ctrl_c)
    reached = steps[1]
    assert isinstance(stopped.value, LearnInterrupted) and stopped.value.step == reached
    message = str(stopped.value)
    assert f"stopped at step {reached:,} of 2,048" in message
    assert f"payoff train --resume {run.path}" in message
    assert agent.step == reached and agent.interrupted and len(steps) == 2
    payload, _ = run.load_checkpoint("ppo")
    assert payload["state"]["loop"]["step"] == reached
    assert "final_eval" not in run.summary() and "finished" not in run.summary()
    agent.learn(128)  # the next call trains on, and ends normally
    assert agent.step >= reached + 128 and not agent.interrupted


def test_a_sigint_without_a_run_says_the_agent_holds_its_training():
    agent = PPO("CartPole-v1", **TINY_PPO)
    with pytest.raises(LearnInterrupted, match=r"at step \d+ of 1,024.*learn\(n\) trains on"):
        agent.learn(1024, callback=lambda a, m: os.kill(os.getpid(), signal.SIGINT))
    assert 0 < agent.step < 1024


def test_a_run_resumed_from_a_checkpoint_without_the_key_takes_its_run_default(
    tmp_path, monkeypatch
):
    """LM runs' checkpoints from before `final_eval` existed must resume with the final
    evaluation they were made with, not Python's default (off)."""
    from payoff.algos.qlearning import QLearning
    from payoff.train import train

    run = train(
        "frozenlake-q",
        ["total_episodes=20", "final_eval_episodes=0"],
        out=tmp_path,
        media=False,
    )
    read = Run.load_checkpoint

    def older(self, algo, name="latest"):  # the checkpoint of an older payoff
        payload, elapsed = read(self, algo, name)
        payload["config"].pop("final_eval_episodes")
        return payload, elapsed

    monkeypatch.setattr(Run, "load_checkpoint", older)
    assert QLearning.from_run(Run.open(run.path)).config.final_eval_episodes == 1000
