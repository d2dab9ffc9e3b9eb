"""LLM training end to end: HF export, exact resume, misbehaving rewards, eval CLI, and GRPO learning."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.grpo import GRPO
from payoff.algos.sft import SFT
from payoff.models.lm import ModelConfig, load_lm, save_lm
from payoff.track.run import Run


def digit_share(prompts, completions, **kwargs):
    """Share of digits in the completion: a reward even an untrained model gets signal from."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def explodes(prompts, completions, **kwargs):
    """Raises on completions without a digit, works on the rest."""
    if any(not any(ch.isdigit() for ch in text) for text in completions):
        raise RuntimeError("no digit to grade")
    return [1.0 for _ in completions]


def flat_when_even(prompts, completions, **kwargs):
    """1 for every completion of a prompt whose first digit is even (a flat group), else digit_share."""
    shares = digit_share(prompts, completions)
    return [1.0 if int(p[0]) % 2 == 0 else s for p, s in zip(prompts, shares, strict=True)]


@pytest.fixture(scope="module")
def fresh_model_dir(tmp_path_factory):
    """An untrained tiny model saved in HF format: GRPO tests start from it, skipping pretraining."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("fresh") / "model"))


def _grpo_settings(model_dir: str, **extra):
    settings = {
        "model": {"path": model_dir},
        "rewards": [{"name": f"{__file__}:digit_share"}],
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 4,
        "learning_rate": 1e-3,
        "eval_every": 2,
        "checkpoint_every": 2,
        "final_eval_k": [1, 2],
        "task": {"eval_size": 8},
    }
    settings.update(extra)
    return settings


def _comparable(run: Run) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")}
        for r in run.records()
    ]


def test_payoff_trained_model_loads_with_plain_transformers(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = Run.create(tmp_path, "sft", {"algo": "sft"})
    sft = SFT(config=None, run=run, steps=3, batch_size=8, eval_every=3, task={"eval_size": 4})
    sft.learn()
    folder = run.path / "model"
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, sft.model(ids).logits, atol=1e-5)


def _sevens_sft(tmp_path, **settings) -> SFT:
    """SFT until every training problem is answered, on a task whose answer is always 7
    (learnt in a few dozen steps), checked every 5 steps."""
    data = tmp_path / "sevens.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+{9 - i}=", "answer": "7"}}\n' for i in range(10)))
    task = {"name": "jsonl", "data": str(data), "test_data": str(data), "eval_size": 8}
    return SFT(
        config=None,
        steps=300,
        batch_size=16,
        eval_every=5,
        stop_at_accuracy=1.0,
        task=task,
        max_new_tokens=2,
        final_eval=True,
        **settings,
    )


def test_sft_stops_at_the_target_accuracy_and_says_so(tmp_path):
    """stop_at_accuracy ends SFT at the first check where the training problems are answered."""
    from payoff.core.errors import ConfigError

    run = Run.create(tmp_path, "sft", {"algo": "sft"})
    sft = _sevens_sft(tmp_path, run=run)
    sft.learn()
    assert sft.stopped_at is not None and sft.step == sft.stopped_at < 300
    assert sft.stopped_at % 5 == 0
    probes = [r["eval/train_accuracy"] for r in run.records() if "eval/train_accuracy" in r]
    assert probes[-1] == 1.0 and all(p < 1.0 for p in probes[:-1])
    assert run.summary()["stopped_at_accuracy"] == sft.stopped_at
    with pytest.raises(ConfigError, match="'stop_at_accuracy' must be in"):
        SFT(config=None, stop_at_accuracy=1.5, task=sft.config.task)


def test_sft_without_the_held_out_curve_trains_the_same_model(tmp_path):
    """held_out_curve=false (how build_base_model pretrains) drops the test-split scores of
    every check but the end; the probes, the stopping step and the weights are the same."""
    runs = {curve: _sevens_sft(tmp_path, held_out_curve=curve).learn() for curve in (True, False)}
    with_curve, without = runs[True], runs[False]
    assert without.stopped_at == with_curve.stopped_at is not None
    assert [r for r in without.history if "eval/accuracy" in r] == []
    assert len([r for r in with_curve.history if "eval/accuracy" in r]) >= 2
    assert without.final_result.accuracy == with_curve.final_result.accuracy
    for a, b in zip(with_curve.model.parameters(), without.model.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("lora_kl", [False, True], ids=["full", "lora-kl"])
def test_grpo_resume_is_exact(tmp_path, fresh_model_dir, lora_kl):
    # lora-kl: LoRA adapters with a KL penalty, whose reference is the model with adapters off.
    extra = {"beta": 0.05, "model": {"path": fresh_model_dir, "lora_rank": 4}} if lora_kl else {}
    straight = Run.create(tmp_path, "a", {"algo": "grpo"})
    GRPO(run=straight, steps=4, **_grpo_settings(fresh_model_dir, **extra)).learn()
    stopped = Run.create(tmp_path, "b", {"algo": "grpo"})
    GRPO(run=stopped, steps=4, **_grpo_settings(fresh_model_dir, **extra)).learn(total=2)
    resumed = GRPO.from_run(stopped)
    assert resumed.step == 2
    resumed.learn()
    stopped.close()
    a, b = _comparable(straight), _comparable(stopped)
    train_a = [r for r in a if "train/loss" in r]
    train_b = [r for r in b if "train/loss" in r]
    assert len(train_a) == 4 and train_a == train_b
    if lora_kl:  # the adapters moved away from the reference
        assert resumed.reference.shares_weights and train_a[-1]["train/kl"] > 0


@pytest.mark.parametrize(
    "extra",
    [
        {},  # the whole batch at once, each prompt run once for its group
        {"minibatch_size": 4, "loss_aggregation": "token"},  # a group per step: some steps all flat
        {"minibatch_size": 2, "updates_per_batch": 2, "loss_aggregation": "dr_grpo"},  # single rows
    ],
    ids=["batch", "group-minibatches", "row-minibatches"],
)
def test_skipping_zero_advantage_rows_changes_the_work_not_the_update(fresh_model_dir, extra):
    def train(skip: bool) -> tuple[GRPO, list[dict]]:
        settings = _grpo_settings(fresh_model_dir, skip_zero_advantage=skip, **extra)
        settings["rewards"] = [{"name": f"{__file__}:flat_when_even"}]
        grpo = GRPO(steps=3, **settings)
        grpo.learn()
        return grpo, [r for r in grpo.history if "train/loss" in r]

    (skipping, logs), (plain, plain_logs) = train(True), train(False)
    assert 0 < sum(r["train/flat_groups"] for r in logs) < len(logs)  # both kinds of group
    for a, b in zip(skipping.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)  # Adam steps are ~1e-3
    for a, b in zip(logs, plain_logs, strict=True):
        for key in ("train/loss", "train/policy_loss", "train/clip_fraction", "train/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


def test_a_raising_reward_is_counted_and_the_run_goes_on(tmp_path, fresh_model_dir):
    run = Run.create(tmp_path, "err", {"algo": "grpo"})
    settings = _grpo_settings(fresh_model_dir)
    settings["rewards"] = [
        {"name": f"{__file__}:digit_share"},
        {"name": f"{__file__}:explodes", "on_error": 0.0},
    ]
    GRPO(run=run, steps=2, **settings).learn()
    run.close()
    records = [r for r in run.records() if "reward/errors" in r]
    assert len(records) == 2 and sum(r["reward/errors"] for r in records) > 0
    assert "reward/digit_share" in records[0]
    events = [e["event"] for e in run.events()]
    assert events and events[0]["kind"] == "reward_error" and "no digit" in events[0]["message"]


def test_eval_cli_reports_pass_at_k(tmp_path, fresh_model_dir, capsys):
    from payoff.cli import main

    run = Run.create(tmp_path, "cli", {"algo": "grpo"})
    settings = _grpo_settings(fresh_model_dir)
    algorithm = GRPO(run=run, steps=1, final_eval=True, **settings)
    algorithm.learn()
    run.close()
    summary = run.summary()
    assert "pass@2" in summary["final_eval"] and summary["final_line"].startswith("test:")
    assert (
        main(["eval", str(run.path), "--split", "ood", "--k", "1,4", "--episodes", "6", "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "ood" and result["problems"] == 6
    assert 0.0 <= result["pass@1"] <= result["pass@4"] <= 1.0
    # a language model acts in no environment: no GIF, one line saying so
    assert main(["play", str(run.path), "--gif", str(tmp_path / "x.gif")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is a grpo run, which has no rendered episodes" in err, err
    assert not (tmp_path / "x.gif").exists()


@pytest.mark.slow
def test_arithmetic_grpo_demo_lifts_held_out_accuracy(tmp_path, monkeypatch):
    """The demo, shortened: pretrain the tiny base model, then GRPO; held-out accuracy must rise."""
    from payoff import train

    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path / "cache"))  # builds the base model itself
    run = train.train(
        "arithmetic-grpo",
        ["steps=150", "eval_every=50", "checkpoint_every=1000", "final_eval_k=[1,4]"],
        out=tmp_path / "runs",
    )
    summary = run.summary()
    start, end = summary["start_accuracy"], summary["final_eval"]["accuracy"]
    # The recipe runs DAPO's loss and dynamic sampling. Measured on an AVX2 machine where
    # the base stops at 575 SFT steps with greedy test accuracy 0.445: after 150 steps
    # 0.615 / 0.70 / 0.695 for seeds 0 / 1 / 2 with one torch thread (+0.17 / +0.255 /
    # +0.25), 0.615 for seed 0 with two (but only +0.09 at step 100, so not 100 steps;
    # plain GRPO had needed 200 steps for +0.17 / +0.01 / +0.10). On AVX-512 kernels the
    # same base scored 0.495. Demand 0.10.
    assert 0.3 < start < 0.65
    assert end >= start + 0.10
    assert (run.media / "llm_training.png").is_file() and (run.media / "report.html").is_file()
    assert (run.path / "model" / "model.safetensors").is_file()


def pays_everything(completions, **_):
    """A reward with a loophole as wide as it gets: every completion is paid."""
    return [1.0] * len(completions)


def test_grpo_canaries_catch_a_reward_that_pays_anything_and_halt_the_run(
    tmp_path, fresh_model_dir
):
    run = Run.create(tmp_path, "canary", {"algo": "grpo"})
    settings = _grpo_settings(
        fresh_model_dir,
        rewards=[{"name": f"{__file__}:pays_everything"}],
        canaries={"share": 0.5},
        on_alarm="halt",
    )
    grpo = GRPO(run=run, steps=4, final_eval=True, **settings)
    grpo.learn()
    assert grpo.halted is not None and grpo.halted.kind == "threshold:integrity/canary_passes"
    assert grpo.step == grpo.halted.step < 4  # halted after the step that raised it
    records = run.records()
    first = next(r for r in records if "integrity/canary_pass_rate" in r)
    assert first["integrity/canary_pass_rate"] == 1.0  # contradicting checks, all "passed"
    events = run.events()
    alarm = next(r for r in events if r["event"]["kind"] == grpo.halted.kind)
    samples = alarm["event"]["evidence"]["samples"]
    assert samples and all(s["reward"] == 1.0 and s["correct"] < 1.0 for s in samples)
    assert any(r["event"]["kind"] == "halt" for r in events)
    summary = run.summary()  # the final evaluation ran, and the summary says why it stopped
    assert "final_eval" in summary and summary["halted"] == {
        "step": grpo.step,
        "alarm": grpo.halted.kind,
    }


def test_grpo_checks_proxy_against_truth_only_when_the_reward_is_not_the_verifier(
    fresh_model_dir,
):
    own = GRPO(steps=1, **_grpo_settings(fresh_model_dir, rewards=[]))
    assert "divergence" not in {m.kind for m in own.monitors}
    paid = GRPO(steps=1, **_grpo_settings(fresh_model_dir))
    assert "divergence" in {m.kind for m in paid.monitors}
    off = GRPO(steps=1, default_monitors=False, **_grpo_settings(fresh_model_dir))
    assert off.monitors == []
