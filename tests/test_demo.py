"""The demo runs its steps side by side, each in its own process with its own log, and
ends by naming every report, in the steps' order."""

from __future__ import annotations

from pathlib import Path

from payoff import demo


def test_the_demo_runs_steps_two_at_a_time_and_names_every_report(tmp_path, monkeypatch, capsys):
    steps = [
        demo.DemoStep("Q-learning", "frozenlake-q", ["total_episodes=200"]),
        demo.DemoStep("PPO", "cartpole-ppo", ["total_steps=4096", "eval_every=0"], minutes=1),
        demo.DemoStep("no such recipe", "not-a-recipe"),  # left out: not among the recipes
    ]
    monkeypatch.setattr(demo, "STEPS", steps)
    assert demo.main(out=str(tmp_path), jobs=2) == 0
    out = capsys.readouterr().out
    assert out.index("[2] PPO") < out.index("[1] Q-learning")  # the longest starts first
    reports = out.split("Reports written:")[1].strip().splitlines()
    assert [line.split(":")[0].strip() for line in reports] == ["Q-learning", "PPO"]
    for line in reports:
        assert Path(line.split(": ", 1)[1]).is_file()
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["01-frozenlake-q.log", "02-cartpole-ppo.log"]
    assert "not-a-recipe" not in out


def test_a_failing_step_stops_the_demo_with_its_message(tmp_path, monkeypatch, capsys):
    steps = [demo.DemoStep("bad key", "frozenlake-q", ["no_such_key=1"])]
    monkeypatch.setattr(demo, "STEPS", steps)
    assert demo.main(out=str(tmp_path), jobs=2) == 2
    assert "no_such_key" in capsys.readouterr().err
