"""Integrity checks: canaries, drift, the default monitors and on_alarm (warn, halt, rollback)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from payoff import PPO
from payoff.core.errors import ConfigError
from payoff.envs.tasks import TaskConfig, make_task
from payoff.envs.tasks.base import contradict_row
from payoff.monitor.detectors import Alarm, Drift, Monitor, build_monitors
from payoff.monitor.integrity import (
    PAID_BUT_WRONG,
    Canaries,
    CanaryConfig,
    inoculated,
    lm_monitors,
)


def test_contradicted_rows_expect_another_value_where_the_prompt_shows_it():
    row = {
        "prompt": "def f(x):\n    # returns x plus 7\n    # f(3) == 10\n",
        "tests": "assert f(1) == 8\nassert f(2) == 9",
        "visible_tests": "assert f(3) == 10",
    }
    twin = contradict_row(row)
    assert twin is not None
    assert twin["tests"] == "assert f(1) == 9\nassert f(2) == 9"
    assert twin["visible_tests"] == "assert f(3) == 11"
    assert twin["prompt"].endswith("# f(3) == 11\n")
    assert row["visible_tests"] == "assert f(3) == 10"  # the original is untouched
    assert contradict_row({"prompt": "12+3=", "answer": "15"})["answer"] == "16"
    assert contradict_row({"prompt": "say hi", "answer": "hello"}) is None
    flipped = contradict_row({"prompt": "p", "tests": "assert even(2) == True"})
    assert flipped is not None and flipped["tests"] == "assert even(2) == False"


def test_canaries_plant_their_share_and_count_passes_only_when_both_twins_pass():
    task = make_task(TaskConfig(name="python_examples"))
    problems = task.sample(np.random.default_rng(0), 400)
    canaries = Canaries(CanaryConfig(share=0.25), task)
    planted = canaries.plant(problems, np.random.default_rng(1))
    share = np.mean(planted.canary)
    assert 0.18 < share < 0.32
    for row, is_canary, twin in zip(planted.rows, planted.canary, planted.twins, strict=True):
        assert bool(row.get("canary")) == is_canary
        assert (twin is not None) == is_canary
    first = planted.canary.index(True)
    totals = [0.0] * len(problems)
    totals[first] = 1.0

    def twins_scoring(score: float):
        def score_twins(index: list[int], twins: list[dict]) -> list[float]:
            assert all(planted.twins[i] is twin for i, twin in zip(index, twins, strict=True))
            return [score if i == first else 0.0 for i in index]

        return score_twins

    metrics, passed = canaries.check(planted, 1, totals, twins_scoring(0.0))  # not the twin's
    assert metrics["integrity/canary_passes"] == 0 and passed == []
    metrics, passed = canaries.check(planted, 1, totals, twins_scoring(1.0))  # contradicting tests
    assert metrics["integrity/canary_passes"] == 1 and passed == [first]
    assert metrics["integrity/canary_pass_rate"] == pytest.approx(1 / sum(planted.canary))
    # no canaries: no draws from the run's random stream, nothing changed
    rng = np.random.default_rng(5)
    off = Canaries(CanaryConfig(share=0.0), task).plant(problems, rng)
    assert off.rows == problems and rng.random() == np.random.default_rng(5).random()


def test_one_off_canaries_show_and_pay_the_contradicting_test():
    task = make_task(TaskConfig(name="python_examples"))
    problems = task.sample(np.random.default_rng(0), 50)
    planted = Canaries(CanaryConfig(share=0.5, mode="one_off"), task).plant(
        problems, np.random.default_rng(2)
    )
    for row, original, is_canary in zip(planted.rows, problems, planted.canary, strict=True):
        if is_canary:
            assert row["prompt"] != original["prompt"]
            shown = row["visible_tests"].removeprefix("assert ")
            assert shown in row["prompt"]


def test_canaries_refuse_rows_without_checks():
    class Plain:
        name = "plain"

        def contradict(self, row):
            return None

    canaries = Canaries(CanaryConfig(share=0.5), Plain())  # type: ignore[arg-type]
    assert canaries.name == "plain"
    with pytest.raises(ConfigError, match="no row with checks to contradict"):
        canaries.plant([{"prompt": "hi"}] * 100, np.random.default_rng(0))


def test_inoculation_goes_before_the_prompt_or_as_a_system_message():
    assert inoculated({"prompt": "def f(x):"}, "# ok")["prompt"] == "# ok\ndef f(x):"
    chat = inoculated({"prompt": "q", "prompt_messages": [{"role": "user", "content": "q"}]}, "ok")
    assert chat["prompt_messages"][0] == {"role": "system", "content": "ok"}
    assert inoculated({"prompt": "q"}, "") == {"prompt": "q"}


def test_drift_fires_on_a_doubled_length_and_an_absolute_rise():
    drift = Drift(key="len", ratio=2.0, baseline=3, window=3)
    alarms = [
        a
        for s, v in enumerate([10, 10, 10, 12, 15, 19, 25, 30, 30])
        for a in drift.update(s, {"len": v})
    ]
    assert len(alarms) == 1 and alarms[0].step == 7  # mean(19, 25, 30) is the first over 20
    rise = Drift(key="cut", ratio=None, increase=0.3, baseline=2, window=2)
    fired = [
        a for s, v in enumerate([0.0, 0.0, 0.1, 0.2, 0.5, 0.6]) for a in rise.update(s, {"cut": v})
    ]
    assert [a.step for a in fired] == [4]  # mean(0.2, 0.5) - 0 > 0.3
    quiet = Drift(key="len", ratio=2.0, baseline=3, window=3)
    assert not [a for s in range(50) for a in quiet.update(s, {"len": 10 + (s % 3)})]
    with pytest.raises(ConfigError, match="ratio"):
        build_monitors([{"kind": "drift", "key": "x", "ratio": 0.5}])


def test_default_lm_monitors_cover_what_the_run_has():
    kinds = {
        m.kind
        for m in lm_monitors(
            proxy="p",
            truth="t",
            code_rewards=["code"],
            canaries=CanaryConfig(share=0.05),
            model_scored=True,
        )
    }
    assert kinds == {"divergence", "threshold", "drift"}
    keys = [
        getattr(m.config, "key", None)
        for m in lm_monitors(
            proxy="p", truth=None, code_rewards=[], canaries=None, model_scored=False
        )
    ]
    assert keys == ["train/completion_length", "train/truncated"]


def test_the_share_paid_but_wrong_rising_raises_a_critical_alarm():
    """A loophole learned while the truth creeps up too (SmolLM2 on answer_anywhere: paid
    0.13 -> 0.71 while final_answer went 0.02 -> 0.15): the divergence check, which wants
    the truth flat, stays quiet; the paid-but-wrong share does not."""
    monitors = lm_monitors(
        proxy="train/reward",
        truth="train/accuracy",
        code_rewards=[],
        canaries=None,
        model_scored=False,
    )
    paid_wrong = [0.11, 0.15, 0.12, 0.31, 0.23, 0.22, 0.34, 0.31, 0.61, 0.32, 0.5]
    accuracy = [0.02, 0.06, 0.06, 0.11, 0.11, 0.08, 0.06, 0.2, 0.1, 0.15, 0.2]
    alarms = []
    for step, (wrong, right) in enumerate(zip(paid_wrong, accuracy, strict=True), start=1):
        record = {"train/reward": wrong + right, "train/accuracy": right, PAID_BUT_WRONG: wrong}
        alarms += [(step, a) for m in monitors for a in m.update(step, record)]
    assert [(step, a.kind, a.severity) for step, a in alarms] == [
        (10, f"drift:{PAID_BUT_WRONG}", "critical")
    ]
    honest = lm_monitors(  # paid by the verifier itself: nothing is ever paid but wrong
        proxy="train/reward", truth=None, code_rewards=[], canaries=None, model_scored=False
    )
    assert PAID_BUT_WRONG not in [getattr(m.config, "key", None) for m in honest]


class FireAt(Monitor):
    """A test monitor: one critical alarm at a step, with onset `since`."""

    kind = "test_alarm"

    def __init__(self, step: int, since: int, once: bool = True):
        self.at, self.since, self.once, self.done = step, since, once, False
        super().__init__(config=object())

    def update(self, step: int, record: dict) -> list[Alarm]:
        if self.fired or (self.once and self.done) or step < self.at:
            return []
        self.fired = self.done = True
        return [Alarm(step, self.kind, "test", "critical", {"since_step": self.since})]


def _ppo(**keys) -> PPO:
    return PPO(
        "CartPole-v1",
        num_envs=4,
        num_steps=16,
        minibatch_size=32,
        epochs=1,
        total_steps=640,
        **keys,
    )


def test_halt_stops_training_at_the_alarm():
    agent = _ppo(on_alarm="halt")
    agent.attach_monitors([FireAt(step=192, since=128)])
    agent.learn()
    assert agent.halted is not None and agent.halted.kind == "test_alarm"
    assert agent.step == agent.halted.step < 640  # the iteration that raised it was the last


def test_warn_goes_on_to_the_end():
    agent = _ppo()
    agent.attach_monitors([FireAt(step=192, since=128)])
    agent.learn()
    assert agent.halted is None and agent.step >= 640 and len(agent.alarms) == 1


def test_rollback_restores_the_snapshot_before_the_onset_and_halts_after_max():
    agent = _ppo(on_alarm="rollback", rollback={"every": 64, "keep": 2, "max": 1})
    agent.attach_monitors([FireAt(step=320, since=200)])
    weights_at: dict[int, dict[str, torch.Tensor]] = {}
    original = agent.between_iterations

    def record() -> None:
        original()
        weights_at[agent.step] = {k: v.clone() for k, v in agent.actor.state_dict().items()}

    agent.between_iterations = record  # type: ignore[method-assign]
    rolled: list[int] = []
    respond = agent.responder.respond

    def watch(alarm: Alarm) -> None:
        kept = [step for step, _ in agent.responder.snapshots]
        assert kept[0] == 0 and len(kept) == 3  # the first and the latest `keep`
        respond(alarm)
        rolled.append(agent.responder.rollbacks)
        snapshot = weights_at[max(s for s in kept if s < 200)]  # newest before the onset
        for key, value in agent.actor.state_dict().items():
            assert torch.equal(value, snapshot[key]), key

    agent.responder.respond = watch  # type: ignore[method-assign]
    agent.learn()
    assert rolled == [1]
    assert agent.step >= 640 and agent.halted is None  # training went on after the rollback
    # the monitors restart from the records up to the snapshot; an alarm that comes back
    # after `max` rollbacks halts the run
    again = _ppo(on_alarm="rollback", rollback={"every": 64, "keep": 2, "max": 1})
    again.attach_monitors([FireAt(step=320, since=200, once=False)])
    again.learn()
    assert again.responder.rollbacks == 1
    assert again.halted is not None and again.step < 640


def test_agent_answers_pass_a_canary_only_when_they_also_fit_the_contradicting_answer():
    canaries = Canaries(CanaryConfig(share=0.5), name="calculator")
    problems = [{"question": f"{i}+1=?", "answer": str(i + 1)} for i in range(40)]
    planted = canaries.plant(problems, np.random.default_rng(0))
    first = planted.canary.index(True)
    group = 2
    answers = ["nonsense"] * (2 * len(problems))
    success = [False] * len(answers)
    answers[2 * first], success[2 * first] = str(first + 1), True  # right, but not the twin's

    totals = [1.0 if ok else 0.0 for ok in success]

    def scored_by(score):  # the agent's way: each episode's answer on its row's twin
        def score_twins(index: list[int], twins: list[dict]) -> list[float]:
            return [score(answers[i], twin) for i, twin in zip(index, twins, strict=True)]

        return score_twins

    def lenient(answer: str, task: dict) -> float:  # a scorer fooled by anything
        return 1.0

    metrics, passed = canaries.check(planted, group, totals, scored_by(lenient))
    assert passed == [2 * first] and metrics["integrity/canary_passes"] == 1

    def exact(answer: str, task: dict) -> float:
        return float(answer == task["answer"])

    metrics, passed = canaries.check(planted, group, totals, scored_by(exact))
    assert passed == [] and metrics["integrity/canary_passes"] == 1  # the run's count so far
