"""What runs show people (issue #62, items 7 and 8): the prompt as the model reads it (chat
template rendered, or said to be absent), the proxy-vs-truth panel named by the run's own
verifier with an axis that holds its rewards, ± in an experiment's results, and the laps of
a reward-hacking run beside the reward it was paid."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest

from payoff.report.page import curve_panels, write_report
from payoff.track.run import Run

# A chat template in characters the tiny model's tokenizer knows (as test_lm_device_templates)
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# ---- item 7: the chat template shown ------------------------------------------------------
@pytest.fixture(scope="module")
def templated_model_dir(tmp_path_factory):
    """payoff's tiny model, its tokenizer_config.json given a chat template."""
    pytest.importorskip("transformers", reason="the llm extra is not installed")
    from payoff.models.lm import ModelConfig, load_lm, save_lm

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    folder = save_lm(model, tokenizer, tmp_path_factory.mktemp("templated") / "model")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return str(folder)


@pytest.fixture(scope="module")
def plain_model_dir(tmp_path_factory):
    """payoff's tiny model as a folder, without a chat template (as it ships)."""
    pytest.importorskip("transformers", reason="the llm extra is not installed")
    from payoff.models.lm import ModelConfig, load_lm, save_lm

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("plain") / "model"))


def _grpo(model: dict, **extra):
    from payoff.algos.grpo import GRPO

    return GRPO(
        model=model,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=2,
        steps=1,
        task={"eval_size": 2},
        device="cpu",
        **extra,
    )


def test_the_rendered_template_is_in_the_console_summary_examples_and_report(
    templated_model_dir, tmp_path, capsys
):
    run = Run.create(tmp_path, "templated", {"algo": "grpo"}, loggers="none")
    grpo = _grpo({"path": templated_model_dir}, run=run)
    grpo.learn()
    run.close()
    console = capsys.readouterr().err
    assert f"the chat template of the tokenizer in {templated_model_dir}" in console
    assert "as the model reads it" in console and "<|assistant|>" in console

    shown = run.summary()["prompt_format"]
    row = shown["row_prompt"]  # a held-out addition problem, '12+34='
    assert shown["example"] == f"<|user|>{row}<|end|>\n<|assistant|>"
    assert shown["example_tokens"] == len(shown["example"])  # one character a token here
    assert "tokenizer_config.json" in shown["chat_template"]
    assert run.summary()["verifier"] == "math"

    example = grpo.evaluate(1, k=()).examples[0]  # the verifier's prompt, and the model's
    assert example["model_input"] == f"<|user|>{example['prompt']}<|end|>\n<|assistant|>"

    page = write_report(run).read_text()
    assert "Prompts as the model reads them" in page
    assert "&lt;|user|&gt;" in page and "<|user|>" not in page  # escaped


def test_without_a_template_the_display_says_so_and_long_prompts_are_bounded(
    templated_model_dir, plain_model_dir
):
    from payoff.algos.shared.lm import shown_text

    off = _grpo({"path": templated_model_dir, "chat_template": "none"}).prompt_format()
    assert off["chat_template"].startswith("no chat template (model.chat_template=none)")
    assert "plain role lines" in off["chat_template"]
    assert off["example"] == off["row_prompt"]  # what the model reads is the row's own text
    tiny = _grpo({"path": plain_model_dir}).prompt_format()
    assert tiny["chat_template"].startswith(f"no chat template (the tokenizer in {plain_model_dir}")
    assert "<|" not in tiny["example"] and tiny["example"] == tiny["row_prompt"]

    cut = shown_text("s" * 1000 + "<|user|>2+2=<|end|>\n<|assistant|>", 120)
    assert len(cut) < 170 and "characters left out" in cut
    assert cut.endswith("<|assistant|>")  # the end of a rendered prompt stays


# ---- item 8: the proxy-vs-truth panel ------------------------------------------------------
def _grpo_run(tmp_path, task: str, rewards: np.ndarray) -> Run:
    """A GRPO run folder of `task` with a reward, the verifier's share and paid-but-wrong."""
    run = Run.create(tmp_path, f"grpo-{task}", {"algo": "grpo", "task": {"name": task}})
    for step, reward in enumerate(rewards, start=1):
        run.log(
            step,
            **{
                "train/reward": float(reward),
                "train/accuracy": 0.5,
                "integrity/proxy_only": 0.25,
            },
        )
    run.close()
    return run


def _drawn(monkeypatch) -> list:
    """The figures the report's LM and curve pictures save (kept open to be read)."""
    import payoff.report.lm
    import payoff.report.plots

    figures: list = []

    def keep(fig, path):
        figures.append(fig)
        return path

    monkeypatch.setattr(payoff.report.lm, "save_figure", keep)
    monkeypatch.setattr(payoff.report.plots, "save_figure", keep)
    return figures


def _legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts]


def test_the_truth_is_named_by_the_runs_verifier(tmp_path, monkeypatch):
    from payoff.report.lm import plot_integrity

    figures = _drawn(monkeypatch)
    for task, passes, fails in (
        ("addition", "answer right (math verifier)", "answer wrong"),
        ("python_examples", "hidden tests pass", "hidden tests fail"),
    ):
        run = _grpo_run(tmp_path, task, np.linspace(0.0, 1.0, 12))
        plot_integrity([run], ["run"], tmp_path / f"{task}.png")
        texts = _legend_texts(figures[-1])
        assert f"run: {passes}" in texts and f"run: paid, {fails}" in texts, texts
        assert any("hidden tests" in text for text in texts) == (task == "python_examples")
    matplotlib.pyplot.close("all")


def test_rewards_outside_0_1_stay_on_the_panels_axis(tmp_path, monkeypatch):
    from payoff.report.lm import plot_integrity

    figures = _drawn(monkeypatch)
    run = _grpo_run(tmp_path, "addition", np.linspace(-0.8, 3.0, 40))
    plot_integrity([run], ["run"], tmp_path / "integrity.png")
    (paid,) = [
        line
        for ax in figures[0].axes
        for line in ax.get_lines()
        if "reward paid" in str(line.get_label())
    ]
    low, high = paid.axes.get_ylim()
    assert low <= float(np.min(paid.get_ydata())) and float(np.max(paid.get_ydata())) <= high
    assert high >= 2.5 and low <= -0.5
    matplotlib.pyplot.close("all")


# ---- item 8: the boat race's results and laps ----------------------------------------------
def test_an_experiments_results_show_plus_minus_not_its_json_escape(tmp_path):
    run = Run.create(tmp_path, "boatrace-hack", {"recipe": "boatrace-hack", "kind": "experiment"})
    line = "PPO, proxy reward (targets) (seed 0): mean return 81.000 ± 0.000 over 10 episodes"
    run.write_summary(member_finals=[line, line.replace("81.000", "10.000")], finished=True)
    page = write_report(run).read_text(encoding="utf-8")
    assert "81.000 ± 0.000" in page and "10.000 ± 0.000" in page
    assert "\\u00b1" not in page


def _boatrace_run(tmp_path, label: str, laps: float) -> Run:
    """A BoatRace PPO run that logs the proxy it is paid rising and the laps it finishes."""
    config = {
        "algo": "ppo",
        "recipe": "boatrace-ppo",
        "label": label,
        "env": {"id": "payoff/BoatRace-v0", "kwargs": {"reward": "proxy"}},
        "episode_info": ["proxy_reward", "true_reward", "cost"],
    }
    run = Run.create(tmp_path, label, config)
    for i, step in enumerate(range(2048, 40_960, 2048)):
        proxy = 38.0 + 6.0 * i
        run.log(
            step,
            **{
                "train/return": proxy,
                "train/episode_proxy_reward": proxy,
                "train/episode_true_reward": laps,
                "train/episode_cost": 150.0,
            },
        )
    run.close()
    return run


def test_the_hack_runs_report_plots_laps_beside_the_reward_paid(tmp_path, monkeypatch):
    from payoff.report.plots import plot_curves

    run = _boatrace_run(tmp_path, "proxy", laps=0.0)
    assert curve_panels(run) == ["train/return", "train/episode_true_reward"]
    figures = _drawn(monkeypatch)
    write_report(run)
    labels = [ax.get_ylabel() for ax in figures[0].axes]
    assert labels[0] == "train/return (the reward the env pays)"
    assert labels[1].startswith("laps finished per episode, the true objective")
    assert figures[0].axes[1].get_ylim()[1] >= 1.0  # laps stuck at 0 read as 0, not noise

    # the experiment's comparison (boatrace-hack's metrics) names both counts too
    raced = _boatrace_run(tmp_path, "progress", laps=10.0)
    plot_curves(
        [run, raced],
        tmp_path / "comparison.png",
        metrics=["train/episode_proxy_reward", "train/episode_true_reward"],
    )
    labels = [ax.get_ylabel() for ax in figures[-1].axes]
    assert labels[0].startswith("targets hit per episode, the proxy")
    assert labels[1].startswith("laps finished per episode, the true objective")
    matplotlib.pyplot.close("all")
