"""The command line's overrides and --version, the progress bar's total, and the run report."""

from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from payoff.cli import main, parse_args
from payoff.track.progress import Progress

SHORT_Q = ["total_episodes=300", "eval_every=100", "eval_episodes=20", "final_eval_episodes=20"]


def only_run(out: Path) -> Path:
    (path,) = [p for p in out.iterdir() if p.is_dir()]
    return path


@pytest.mark.parametrize(
    ("argv", "overrides", "seed", "no_media"),
    [
        (["--seed", "1", "env.id=CartPole-v1"], ["env.id=CartPole-v1"], 1, False),
        (["--no-media", "total_steps=20000"], ["total_steps=20000"], None, True),
        (
            ["a=0", "--seed", "2", "a=1", "--no-media", "b.c=-3", "--out", "x", "d=4"],
            ["a=0", "a=1", "b.c=-3", "d=4"],  # in the order given: the last a= wins
            2,
            True,
        ),
    ],
)
def test_overrides_parse_before_and_after_flags(argv, overrides, seed, no_media):
    args = parse_args(["train", "cartpole-ppo", *argv])
    assert args.recipe == "cartpole-ppo"
    assert args.overrides == overrides
    assert (args.seed, args.no_media) == (seed, no_media)


def test_redteam_overrides_after_flags():
    args = parse_args(["redteam", "boatrace", "--out", "x", "budget=50000"])
    assert (args.spec, args.overrides, args.out) == ("boatrace", ["budget=50000"], "x")


@pytest.mark.parametrize(
    ("argv", "bad"),
    [(["train", "frozenlake-q", "--bogus"], "--bogus"), (["eval", "r", "a=1"], "a=1")],
)
def test_unknown_flags_and_stray_overrides_are_still_refused(argv, bad, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert f"unrecognized arguments: {bad}" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"payoff {version('payoff')}"


def test_train_with_overrides_after_the_flags_records_them(tmp_path):
    out = tmp_path / "runs"
    argv = ["train", "frozenlake-q", "--seed", "1", "--no-media", *SHORT_Q, "--out", str(out)]
    assert main(argv) == 0
    config = yaml.safe_load((only_run(out) / "config.yaml").read_text())
    assert config["total_episodes"] == 300 and config["seed"] == 1
    assert config["overrides"] == [*SHORT_Q, "seed=1"]


def test_progress_overshoot_keeps_the_total(monkeypatch, capsys):
    monkeypatch.setenv("PAYOFF_PROGRESS", "1")
    progress = Progress(20_000)
    progress.update(16_384)
    progress.update(8_192, ret=1.0)  # the last rollout ends 4,576 steps past the total
    bar = str(progress._bar)
    progress.close()
    assert progress._bar.n == 20_000 and progress._bar.total == 20_000
    assert "20.0k/20.0k" in bar and "100%" in bar
