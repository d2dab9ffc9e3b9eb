"""Learning from preferences: data and errors, loss math by hand, reward model, DPO, best-of-N."""

from __future__ import annotations

import itertools
import json
import math
import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.best_of_n import best_of_n_weights, bon_kl, expected_best_of_n
from payoff.algos.shared.preference import bradley_terry_loss, dpo_loss
from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks import TaskConfig, make_task
from payoff.envs.tasks.preferences import gold_score, read_preferences


# ---- data -------------------------------------------------------------------------------
def test_preference_rows_read_and_bad_rows_name_file_and_line(tmp_path):
    good = tmp_path / "pairs.jsonl"
    good.write_text(json.dumps({"prompt": "1+1=", "chosen": "2", "rejected": "3"}) + "\n\n")
    assert read_preferences(good) == [{"prompt": "1+1=", "chosen": "2", "rejected": "3"}]
    cases = {
        "{not json": "not valid JSON",
        json.dumps({"prompt": "1+1=", "chosen": "2"}): "needs a string 'rejected'",
        json.dumps({"prompt": "1+1=", "chosen": "2", "rejected": "2"}): "identical",
        json.dumps(["a", "b"]): "JSON object",
    }
    for line, message in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(
            json.dumps({"prompt": "1+1=", "chosen": "2", "rejected": "3"}) + "\n" + line + "\n"
        )
        with pytest.raises(DataError, match=rf"bad.jsonl:2: .*{message}"):
            read_preferences(bad)


def test_gold_scorer_pays_for_correct_and_brief():
    assert gold_score("8", "8") == 1.0
    assert gold_score("9", "8") == 0.0
    assert gold_score("Great! 8", "8", brevity=0.03) == pytest.approx(1 - 7 * 0.03)
    assert gold_score("8 or 9", "8") < 0  # two numbers: not an answer


def test_biased_rater_prefers_length_with_the_set_probability():
    task = make_task(TaskConfig(name="styled_addition", options={"opener_rate": 0.5}))
    rng = np.random.default_rng(0)
    honest = task.pairs(rng, 400, bias=0.0)
    assert all(r["gold_chosen"] >= r["gold_rejected"] for r in honest)
    sycophant = task.pairs(rng, 400, bias=1.0)
    differ = [r for r in sycophant if len(r["chosen"]) != len(r["rejected"])]
    assert differ and all(len(r["chosen"]) > len(r["rejected"]) for r in differ)
    half = task.pairs(rng, 2000, bias=0.5)
    against_gold = np.mean([r["gold_chosen"] < r["gold_rejected"] for r in half])
    assert 0.05 < against_gold < 0.4  # the bias shows, but gold still decides most labels


# ---- losses by hand ---------------------------------------------------------------------
def test_bradley_terry_loss_matches_hand_computation():
    chosen, rejected = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    # -log sigmoid(1) = log(1 + e^-1) = 0.31326; -log sigmoid(-2) = log(1 + e^2) = 2.12693
    expected = (math.log(1 + math.exp(-1)) + math.log(1 + math.exp(2))) / 2
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected, abs=1e-6)
    assert bradley_terry_loss(chosen + 5, rejected + 5).item() == pytest.approx(expected, abs=1e-6)


def test_dpo_and_ipo_losses_match_hand_computation():
    policy_c, policy_r = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    ref_c, ref_r = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])
    # h = (pc - rc) - (pr - rr) = [1 - (-1), 0 - 1] = [2, -1]
    beta = 0.5
    sig = dpo_loss(policy_c, policy_r, ref_c, ref_r, beta, "sigmoid")
    expected = (math.log(1 + math.exp(-1.0)) + math.log(1 + math.exp(0.5))) / 2
    assert sig.loss.item() == pytest.approx(expected, abs=1e-6)
    assert sig.chosen_rewards.tolist() == pytest.approx([0.5, 0.0])
    assert sig.margin.item() == pytest.approx((1.0 - 0.5) / 2)
    assert sig.accuracy.item() == 0.5
    ipo = dpo_loss(policy_c, policy_r, ref_c, ref_r, beta, "ipo")
    # target margin 1 / (2 beta) = 1: ((2 - 1)^2 + (-1 - 1)^2) / 2 = 2.5
    assert ipo.loss.item() == pytest.approx(2.5)


def test_best_of_n_estimator_matches_enumeration_and_kl_formula():
    rng = np.random.default_rng(1)
    proxy, gold = rng.normal(size=7), rng.normal(size=7)
    for n in (1, 2, 3, 7):
        picks = [gold[max(s, key=lambda i: proxy[i])] for s in itertools.combinations(range(7), n)]
        assert expected_best_of_n(proxy, gold, n) == pytest.approx(np.mean(picks))
        assert best_of_n_weights(7, n).sum() == pytest.approx(1.0)
    assert bon_kl(1) == 0.0
    assert bon_kl(16) == pytest.approx(math.log(16) - 15 / 16)


# ---- training -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """The tiny SFT policy on styled addition, built once into a private cache."""
    from payoff.algos.reward_model import small_base
    from payoff.algos.sft import build_base_model

    old = os.environ.get("PAYOFF_CACHE")
    os.environ["PAYOFF_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return str(
            build_base_model(TaskConfig(name="styled_addition", eval_size=64), small_base(), 24)
        )
    finally:
        if old is None:
            os.environ.pop("PAYOFF_CACHE")
        else:
            os.environ["PAYOFF_CACHE"] = old


def test_reward_model_beats_chance_on_held_out_pairs_and_ensemble_reports_disagreement(
    base_model, tmp_path
):
    from payoff.algos.reward_model import RewardModel
    from payoff.rewards.learned import RewardModelScorer
    from payoff.track.run import Run

    run = Run.create(tmp_path, "rm", {"algo": "reward_model"})
    rm = RewardModel(
        run=run,
        model={"path": base_model},
        preferences={"bias": 0.0, "train_pairs": 1000, "test_pairs": 200},
        ensemble=2,
        steps=150,
        learning_rate=2e-3,
        eval_every=150,
    )
    rm.learn()
    result = rm.evaluate()
    assert result.accuracy > 0.6, result.line()
    assert result.disagreement > 0 and len(result.member_accuracy) == 2
    scorer = RewardModelScorer.from_path(run.path / "reward_model")
    scores = scorer(["3+4="] * 2, ["7", "What a great question! 9"])
    assert len(scorer.last_std) == 2 and scores[0] > scores[1]
    # PPO-RLHF against this ensemble reports the members' disagreement on its own samples
    from payoff.algos.rlhf_ppo import RLHFPPO

    ppo = RLHFPPO(
        model={"path": base_model},
        reward_model=str(run.path / "reward_model"),
        steps=2,
        prompts_per_step=8,
        minibatch_size=8,
        eval_every=100,
        task={"name": "styled_addition", "eval_size": 8},
    ).learn()
    spreads = [r["reward/disagreement"] for r in ppo.history if "reward/disagreement" in r]
    assert len(spreads) == 2 and all(s > 0 for s in spreads)


def test_dpo_raises_the_held_out_margin(base_model):
    from payoff.algos.dpo import DPO

    dpo = DPO(
        model={"path": base_model},
        preferences={"bias": 0.0, "train_pairs": 500, "test_pairs": 200},
        steps=30,
        eval_every=30,
    )
    before = dpo.evaluate_pairs(with_gold=False)
    dpo.learn()
    after = dpo.evaluate_pairs(with_gold=False)
    assert before.margin == pytest.approx(0.0, abs=1e-5)  # the policy starts as its reference
    assert after.logp_margin > before.logp_margin + 1.0
    assert after.accuracy > 0.6, after.line()  # measured 0.69 (seed 0)


def test_synthetic_pairs_need_the_styled_task(base_model):
    from payoff.algos.dpo import DPO

    with pytest.raises(ConfigError, match="styled_addition"):
        DPO(model={"path": base_model}, task={"name": "sorting"})
    with pytest.raises(ConfigError, match="show_working=true"):  # pairs need the worked reply
        DPO(model={"path": base_model}, task={"name": "addition"})


def test_worked_arithmetic_pairs_prefer_the_right_working():
    from payoff.rewards.verifiers import final_answer_reward

    task = make_task(
        TaskConfig(name="multiplication", options={"second_digits": 1, "show_working": True})
    )
    assert task.working(83, 3) == "83 * 3 = 80 * 3 + 3 * 3 = 240 + 9 = 249"
    assert task.working(83, 3, slip=10) == "83 * 3 = 80 * 3 + 3 * 3 = 250 + 9 = 259"
    adding = make_task(TaskConfig(name="addition", options={"show_working": True}))
    assert adding.working(47, 38) == "47 + 38 = 40 + 30 + 7 + 8 = 70 + 15 = 85"
    rng = np.random.default_rng(0)
    train, test = task.pairs(rng, 60, 0.0, "train"), task.pairs(rng, 30, 0.0, "test")
    assert {r["key"] for r in train}.isdisjoint(r["key"] for r in test)
    for rows in (train, test):
        answers = [r["answer"] for r in rows]
        prompts = [r["prompt"] for r in rows]
        chosen = final_answer_reward(prompts, [r["chosen"] for r in rows], answer=answers)
        rejected = final_answer_reward(prompts, [r["rejected"] for r in rows], answer=answers)
        assert chosen == [1.0] * len(rows) and rejected == [0.0] * len(rows)
    swapped = task.pairs(np.random.default_rng(1), 200, 0.5, "train")
    assert 0.3 < np.mean([r["chosen"] != r["demonstration"] for r in swapped]) < 0.7


def test_dpo_on_worked_pairs_reports_a_win_rate_against_the_base(base_model):
    from payoff.algos.dpo import DPO

    dpo = DPO(
        model={"path": base_model},
        task={"name": "addition", "options": {"digits": 1, "show_working": True}, "eval_size": 16},
        preferences={"train_pairs": 40, "test_pairs": 8},
        steps=2,
        batch_size=4,
        max_new_tokens=8,
        final_eval=True,
    )
    start = dpo.evaluate_pairs()
    assert start.win_rate == 0.5  # before the first step the policy is the base: all ties
    base = dpo.base_scores.copy()
    dpo.learn()
    after = dpo.evaluate_pairs()
    assert (dpo.base_scores == base).all()  # kept from step 0, not retaken
    assert start.gold == pytest.approx(float(base.mean()))
    wins = np.mean((dpo.greedy_scores() > base) + 0.5 * (dpo.greedy_scores() == base))
    assert after.win_rate == pytest.approx(wins)


def test_rpo_alpha_holds_the_chosen_replies_likelihood_up(base_model):
    """RPO (TRL's rpo_alpha): DPO's loss plus the chosen replies' NLL per token."""
    from payoff.algos.dpo import DPO, pair_logprobs

    chosen = {}
    for alpha in (0.0, 1.0):
        dpo = DPO(
            model={"path": base_model},
            preferences={"train_pairs": 64, "test_pairs": 8},
            rpo_alpha=alpha,
            steps=6,
            batch_size=16,
            learning_rate=3e-4,
        )
        dpo.learn()
        logps = pair_logprobs(dpo.model, dpo.tokenizer, dpo.train_rows, pairs=dpo.train_pairs)
        chosen[alpha] = float(logps[:, 0].mean())
        assert ("train/chosen_nll" in dpo.history[-1]) == (alpha > 0)
    assert chosen[1.0] > chosen[0.0] + 0.1, chosen
    with pytest.raises(ConfigError, match="rpo_alpha"):
        DPO(model={"path": base_model}, rpo_alpha=-1.0)


def test_rlhf_ppo_raises_gold_reward_at_small_kl(base_model):
    from payoff.algos.rlhf_ppo import RLHFPPO

    ppo = RLHFPPO(
        model={"path": base_model},
        rewards=[{"name": "payoff.envs.tasks.preferences:gold_reward"}],
        steps=40,
        learning_rate=5e-4,
        eval_every=1000,
    )
    ppo.learn()
    records = [r for r in ppo.history if "reward/gold" in r]
    first = np.mean([r["reward/gold"] for r in records[:8]])
    last = np.mean([r["reward/gold"] for r in records[-8:]])
    kl = np.mean([r["train/kl"] for r in records[-8:]])
    assert last > first + 0.05, (first, last)
    assert kl < 2.0  # nats per completion: it got there without leaving the reference far behind


def test_rlhf_ppo_takes_one_reward_source():
    from payoff.algos.rlhf_ppo import RLHFPPOConfig

    config = RLHFPPOConfig(reward_model="runs/x/reward_model", rewards=[{"name": "math"}])
    with pytest.raises(ConfigError, match="at most one of 'reward_model'"):
        config.validate()


@pytest.mark.parametrize("algo", ["dpo", "rlhf_ppo", "reward_model"])
def test_resume_after_a_stop_is_exact(algo, base_model, tmp_path):
    from payoff.algos import get_algorithm
    from payoff.track.run import Run

    cls = get_algorithm(algo)
    settings = {
        "dpo": {
            "preferences": {"train_pairs": 64, "test_pairs": 16},
            "batch_size": 8,
            "log_every": 1,
        },
        "rlhf_ppo": {
            "rewards": [{"name": "payoff.envs.tasks.preferences:gold_reward"}],
            "prompts_per_step": 8,
            "minibatch_size": 4,
            "task": {"name": "styled_addition", "eval_size": 8},
        },
        "reward_model": {
            "preferences": {"train_pairs": 64, "test_pairs": 16},
            "batch_size": 8,
            "log_every": 1,
        },
    }[algo]
    common = {
        "model": {"path": base_model},
        "steps": 4,
        "eval_every": 2,
        "checkpoint_every": 2,
        **settings,
    }

    def comparable(run):
        return [
            {k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")}
            for r in run.records()
        ]

    straight = Run.create(tmp_path, "a", {"algo": algo})
    cls(run=straight, **common).learn()
    stopped = Run.create(tmp_path, "b", {"algo": algo})
    cls(run=stopped, **common).learn(total=2)
    resumed = cls.from_run(stopped)
    assert resumed.progress_step() == 2
    resumed.learn()
    straight.close()
    stopped.close()
    assert comparable(straight) == comparable(stopped)


def test_dpo_on_your_own_pairs_is_evaluated_on_its_held_out_pairs(base_model):
    # `payoff eval` calls evaluate(): the built-in task's problems say nothing of your pairs
    from payoff.algos.dpo import DPO, DPOEval

    pairs = [
        {"prompt": f"{a}+{a}=", "chosen": f" {2 * a}", "rejected": f" {2 * a + 1}"}
        for a in range(40)
    ]
    dpo = DPO(model={"path": base_model}, preferences=pairs, steps=1)
    assert dpo.progress_label() == "your pairs"  # not the task it would make pairs from
    result = dpo.evaluate(50)
    assert isinstance(result, DPOEval) and result.gold is None
    assert result.pairs == len(dpo.test_rows) > 0 and "held-out pairs" in result.line()
    with pytest.raises(ConfigError, match="evaluated on their held-out pairs.*--k, --split apply"):
        dpo.evaluate(50, split="ood", k=[4])  # what `payoff eval RUN --split ood --k 4` passes


def test_rlhf_ppo_with_eval_every_0_scores_the_start_and_the_end(base_model, tmp_path):
    from payoff.algos.rlhf_ppo import RLHFPPO
    from payoff.track.run import Run

    run = Run.create(tmp_path, "rlhf", {"algo": "rlhf_ppo"})
    RLHFPPO(
        run=run,
        model={"path": base_model},
        rewards=[{"name": "payoff.envs.tasks.preferences:gold_reward"}],
        steps=2,
        prompts_per_step=8,
        minibatch_size=8,
        eval_every=0,
        final_eval=True,  # (made in Python: off unless asked for)
        task={"name": "styled_addition", "eval_size": 8},
    ).learn()
    run.close()
    evals = [r["step"] for r in run.records() if "eval/gold" in r]
    assert evals == [0]  # the start only: the end is the summary's
    assert "start" in run.summary()["final_line"] and "nan" not in run.summary()["final_line"]
