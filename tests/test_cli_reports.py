"""The command line's overrides and --version, the progress bar's total, and the run report."""

import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from payoff.cli import main, parse_args
from payoff.report.page import curve_panels, write_report
from payoff.report.plots import final_point, point_count
from payoff.track.progress import Progress
from payoff.track.run import Run

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


def test_report_of_a_real_run_names_recipe_overrides_and_results(tmp_path):
    out = tmp_path / "runs"
    assert main(["train", "frozenlake-q", "--seed", "1", *SHORT_Q, "--out", str(out)]) == 0
    page = (only_run(out) / "media" / "report.html").read_text()
    assert "<b>Recipe <code>frozenlake-q</code></b>: Tabular Q-learning" in page
    assert "<b>Overrides:</b> <code>total_episodes=300</code>" in page and "seed=1" in page
    assert "<h3>Final evaluation</h3>\n<table><tr><th>mean_return</th>" in page
    assert "{'mean_return'" not in page and "mean_return:" not in page  # no raw dict
    assert "<img src='curves.png'" in page and "learning_curve" not in page


def fake_run(tmp_path: Path, records: list[dict], summary: dict | None = None) -> Run:
    config = {
        "recipe": "cartpole-ppo",
        "description": "solves in ~0.5 s",
        "algo": "ppo",
        "overrides": ["total_steps=300"],
        "env": {"id": "CartPole-v1"},
        "seed": 0,
    }
    run = Run.create(tmp_path, "fake", config)
    for record in records:
        run.log(**record)
    run.close()
    if summary:
        run.write_summary(**summary)
    return run


def test_report_has_no_panel_for_a_one_point_metric(tmp_path):
    returns = [{"step": s, "train/return": r} for s, r in ((100, 10.0), (200, 20.0), (300, 30.0))]
    run = fake_run(tmp_path, [*returns, {"step": 300, "eval/mean_return": 25.0}])
    assert curve_panels(run) == ["train/return"]
    page = write_report(run).read_text()
    assert "<h3>Metrics logged once</h3>" in page
    assert "<code>eval/mean_return</code></th><td>25 <span class='note'>at step 300" in page
    assert "Overrides:</b> <code>total_steps=300</code>" in page
    assert (run.media / "curves.png").is_file()


def test_report_draws_a_repeated_curve_once_and_the_final_evaluation_on_it(tmp_path):
    evals = [
        {"step": s, "eval/success_rate": v, "eval/mean_return": v}
        for s, v in ((100, 0.1), (200, 0.3))
    ]
    final = {"step": 300, "final/success_rate": 0.5, "final/mean_return": 0.5}
    run = fake_run(tmp_path, [*evals, final], {"final_eval": {"mean_return": 0.5}})
    assert curve_panels(run) == ["eval/success_rate"]  # its mean return is the same curve
    assert final_point(run, "eval/success_rate") == (300.0, 0.5)
    assert final_point(run, "train/return") is None


def test_final_point_falls_back_to_the_summary(tmp_path):
    run = fake_run(
        tmp_path,
        [{"step": 0, "eval/accuracy": 0.4}, {"step": 5, "eval/accuracy": 0.5}],
        {"final_eval": {"accuracy": 0.6, "examples": []}, "finished_step": 6},
    )
    assert final_point(run, "eval/accuracy") == (6.0, 0.6)
    assert point_count(run, "eval/accuracy") == 3


def test_report_shows_the_last_training_samples_with_their_rewards(tmp_path):
    run = fake_run(tmp_path, [{"step": s, "train/reward": s / 10} for s in (1, 2, 3)])
    sample = {"prompt": "2+2=", "reward": 0.25, "math": 0.0, "short": 0.5}
    run.append_jsonl("samples.jsonl", [{"step": 2, "completion": "5", **sample}])
    run.append_jsonl("samples.jsonl", [{"step": 3, "completion": c, **sample} for c in "48"])
    page = write_report(run).read_text()
    assert "<h2>Training samples and their rewards</h2>" in page and "at step 3" in page
    assert "<th>short</th>" in page and "<pre>8</pre>" in page and "<pre>5</pre>" not in page


def test_a_report_escapes_what_a_copied_run_wrote(tmp_path):
    # a downloaded run's files are anyone's: nothing from them reaches the page as markup
    import json

    from payoff.cli import main

    assert (
        main(["train", "cartpole-ppo", "total_steps=512", "--no-media", "--out", str(tmp_path)])
        == 0
    )
    (run,) = tmp_path.iterdir()
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": "<script>alert(1)</script>", "time": 1, "zz/once": 1.0}) + "\n")
        event = {"kind": "k", "severity": "info", "message": "m"}
        f.write(
            json.dumps({"step": "<img src=x onerror=alert(2)>", "time": 1, "event": event}) + "\n"
        )
    summary = json.loads((run / "summary.json").read_text())
    summary.setdefault("final_eval", {})["mean_return"] = "<script>alert(3)</script>"
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run)]) == 0
    page = (run / "media" / "report.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(3)" in page


def test_a_run_with_symbolic_links_inside_is_refused(tmp_path, capsys):
    # payoff writes no links; a copied run's media/x.png -> ~/.bashrc would be overwritten
    assert (
        main(
            [
                "train",
                "cartpole-ppo",
                "total_steps=512",
                "--no-media",
                "--out",
                str(tmp_path / "runs"),
            ]
        )
        == 0
    )
    (run,) = (tmp_path / "runs").iterdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (run / "media" / "curves.png").unlink(missing_ok=True)
    (run / "media" / "curves.png").symlink_to(victim)
    assert main(["report", str(run)]) != 0
    assert "holds symbolic links (media/curves.png)" in capsys.readouterr().err
    assert victim.read_text() == "keep me"


def test_text_from_a_copied_run_reaches_the_terminal_without_escapes():
    from payoff.cli import _printable

    assert _printable("ok\x1b]52;c;ZXZpbA==\x07 \x1b[2J\nnext") == "ok?]52;c;ZXZpbA==? ?[2J\nnext"


def test_a_run_with_a_corrupt_checkpoint_still_gets_a_metrics_report(tmp_path, capsys):
    assert (
        main(["train", "cartpole-ppo", "total_steps=512", "--no-media", "--out", str(tmp_path)])
        == 0
    )
    (run,) = tmp_path.iterdir()
    checkpoint = Run.open(run).checkpoint_path()
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    assert main(["report", str(run)]) == 0
    assert "the report shows the metrics only" in capsys.readouterr().err
    assert (run / "media" / "report.html").is_file()


def test_a_config_key_given_as_a_flag_is_answered_with_its_key_value_form(capsys):
    with pytest.raises(SystemExit):
        parse_args(["train", "cartpole-ppo", "--device", "cuda"])
    assert "config keys are set as key=value: device=cuda" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # TRL's name: payoff's is what to type
        parse_args(["train", "arithmetic-grpo", "--max_steps", "5"])
    assert "key=value: steps=5 (TRL's max_steps is payoff's steps)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["train", "cartpole-ppo", "--seeed", "3"], "Did you mean --seed?"),
        (["train", "cartpole-ppo", "--no-medai"], "Did you mean --no-media?"),
        (["eval", "runs/x", "--episdes", "3"], "Did you mean --episodes?"),
    ],
)
def test_a_mistyped_flag_is_answered_with_the_flag(argv, hint, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    err = capsys.readouterr().err
    assert hint in err and "key=value" not in err


def test_plot_says_which_runs_have_no_line(tmp_path, capsys):
    # a tic-tac-toe run among CartPole ones vanished from the legend without a word
    from payoff.cli import main
    from payoff.track.run import Run

    paths = []
    for name, record in (
        ("a", {"eval/mean_return": 1.0}),
        ("b", {"eval/mean_return": 2.0}),
        ("c", {"eval/elo": 3.0}),
    ):
        run = Run.create(
            tmp_path,
            name,
            {"recipe": name, "env": {"id": "CartPole-v1"}}
            if name != "c"
            else {"recipe": "c", "game": "tictactoe"},
        )
        run.log(10, **record)
        run.close()
        paths.append(str(run.path))
    assert main(["plot", *paths, "--out", str(tmp_path / "p.png")]) == 0
    err = capsys.readouterr().err
    assert "c logged none of eval/mean_return" in err and "tictactoe" in err and "?" not in err


def test_an_experiment_prints_each_members_result(tmp_path, capsys):
    # the terminal showed only run: and report: for a whole ablation
    from payoff.cli import main

    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "kind: experiment\nmembers:\n"
        "  - {recipe: frozenlake-q, seeds: [0, 1], label: default}\n"
        "  - {recipe: frozenlake-q, seeds: [0], overrides: [gamma=0.5], label: short-sighted}\n"
    )
    assert (
        main(
            [
                "train",
                str(experiment),
                "total_episodes=200",
                "final_eval_episodes=20",
                "--out",
                str(tmp_path / "runs"),
                "--no-media",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for label in (
        "default (seed 0): mean return",
        "default (seed 1): ",
        "short-sighted (seed 0): ",
    ):
        assert label in out
    # --no-media: no comparison or report for the experiment either
    (run,) = (tmp_path / "runs").iterdir()
    assert "report:" not in out and not (run / "media" / "report.html").exists()
    # members are named by label and seed, not twelve times by the recipe
    names = sorted(p.name.split("-", 2)[2] for p in (run / "members").iterdir())
    assert names == ["default-seed0", "default-seed1", "short-sighted-seed0"]
    # eval, play and --resume of the experiment itself name its members
    for command in (["eval", str(run)], ["play", str(run)], ["train", "--resume", str(run)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "is an experiment" in err and "default-seed0" in err, command
    # plot draws its members' curves (it said "no run logged 'step'. Logged: nothing yet")
    assert main(["plot", str(run), "--out", str(tmp_path / "exp.png")]) == 0
    assert (tmp_path / "exp.png").is_file()


def test_an_env_whose_render_raises_still_gets_its_report(tmp_path, capsys, monkeypatch):
    # the finished run ended in a traceback from render(), with no curves and no report
    from payoff.cli import main

    (tmp_path / "broken_render.py").write_text(
        "import gymnasium as gym\n"
        "class Env(gym.Wrapper):\n"
        "    def __init__(self, render_mode=None):\n"
        "        super().__init__(gym.make('CartPole-v1', render_mode=render_mode))\n"
        "    def render(self):\n"
        "        raise RuntimeError('no display')\n"
    )
    monkeypatch.chdir(tmp_path)
    args = [
        "train",
        "cartpole-ppo",
        "env.entry_point=broken_render:Env",
        "total_steps=512",
        "num_envs=2",
        "num_steps=64",
        "minibatch_size=64",
        "final_eval_episodes=1",
        "--out",
        str(tmp_path / "runs"),
    ]
    assert main(args) == 0
    assert (
        "no episode GIF: the env's render raised RuntimeError: no display"
        in capsys.readouterr().err
    )
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "media" / "report.html").exists()


def test_training_on_past_a_halting_alarm_is_said(tmp_path, capsys):
    # learn() after a halt did nothing in silence; a resumed halted run trained on with its
    # summary still saying "halted"
    import json

    import pytest

    from payoff import PPO
    from payoff.cli import main
    from payoff.monitor.detectors import Alarm

    agent = PPO("CartPole-v1", num_envs=2, num_steps=32, minibatch_size=32)
    agent.halted = Alarm(64, "divergence", "made up")
    with pytest.warns(RuntimeWarning, match="halted by the divergence alarm at step 64"):
        agent.learn(64)
    args = [
        "train",
        "cartpole-ppo",
        "total_steps=2048",
        "num_envs=2",
        "num_steps=64",
        "minibatch_size=64",
        "on_alarm=halt",
        "final_eval_episodes=1",
        "--no-media",
        "monitors=[{kind: threshold, key: train/return, above: 1.0}]",
        "--out",
        str(tmp_path),
    ]
    main(args)
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "summary.json").read_text())["halted"]["alarm"].startswith("threshold")
    capsys.readouterr()
    main(["train", "--resume", str(run), "total_steps=4096", "--no-media"])
    assert "note: this run was halted by the threshold" in capsys.readouterr().err
    assert "halted" not in json.loads((run / "summary.json").read_text())


MY_ENV = """
import gymnasium as gym
import numpy as np


class Coin(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), self.t >= 5, False, {}
"""


def test_a_run_whose_env_module_is_not_here_still_gets_a_metrics_report(
    tmp_path, capsys, monkeypatch
):
    """`payoff report` from another folder than the one holding the run's own env module:
    the checkpoint cannot be rebuilt there (a ConfigError naming the module), the metrics can."""
    home = tmp_path / "project"
    home.mkdir()
    (home / "coin_env.py").write_text(MY_ENV)
    monkeypatch.chdir(home)
    argv = [
        "train",
        "cartpole-ppo",
        "env.entry_point=coin_env:Coin",
        "total_steps=512",
        "--no-media",
    ]
    assert main([*argv, "--out", str(tmp_path / "runs")]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delitem(sys.modules, "coin_env", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(home))])
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert "coin_env" in err and "the report shows the metrics only" in err
    assert (run / "media" / "report.html").is_file()


def test_a_cache_key_holding_a_path_still_names_a_folder():
    from payoff.core.cache import cache_folder

    assert cache_folder("k", "n", {"folder": Path("/data")}) == cache_folder(
        "k", "n", {"folder": "/data"}
    )
