"""GRPO's frontier kit by hand: loss aggregations, advantage estimators, overlong shaping,
rollout/trainer mismatch correction, micro-batches, dynamic sampling."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.shared.group import (
    advantages_of,
    aggregate,
    canonical_aggregation,
    grpo_loss,
    overlong_penalty,
)
from payoff.algos.shared.mismatch import mismatch
from payoff.core.errors import ConfigError

# per-token losses l and mask m of three completions (lengths 2, 1, 3), T = 3
L = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])


def test_each_aggregation_as_its_paper_defines_it():
    # grpo: mean over each completion's tokens, then over completions
    assert aggregate(L, M, "grpo").item() == pytest.approx((1.5 + 3.0 + 5.0) / 3)
    # dapo: every token of the batch weighs the same
    assert aggregate(L, M, "dapo").item() == pytest.approx(21.0 / 6)
    # dr_grpo: a constant, completions x max_new_tokens
    assert aggregate(L, M, "dr_grpo", max_tokens=4).item() == pytest.approx(21.0 / 12)
    # bnpo: tokens of the local (micro-)batch; alone it is dapo
    assert aggregate(L, M, "bnpo").item() == pytest.approx(21.0 / 6)
    # the old names stay accepted
    assert aggregate(L, M, "sequence").item() == aggregate(L, M, "grpo").item()
    assert aggregate(L, M, "token").item() == aggregate(L, M, "dapo").item()


def test_micro_batch_parts_add_up_to_the_whole_batch_except_bnpo():
    """Two micro-batches ({0, 1} and {2}) with the whole batch's denominators sum to the
    whole-batch loss; bnpo instead averages each micro-batch's own token mean."""
    a, b = [0, 1], [2]
    for how in ("grpo", "dapo", "dr_grpo"):
        whole = aggregate(L, M, how, max_tokens=4)
        parts = sum(aggregate(L[i], M[i], how, max_tokens=4, rows=3, tokens=6) for i in (a, b))
        assert parts.item() == pytest.approx(whole.item()), how
    bnpo = (aggregate(L[a], M[a], "bnpo") + aggregate(L[b], M[b], "bnpo")) / 2
    assert bnpo.item() == pytest.approx((6.0 / 3 + 15.0 / 3) / 2)


def test_unknown_aggregation_names_the_valid_ones():
    with pytest.raises(ConfigError, match="grpo, dapo, dr_grpo, bnpo"):
        canonical_aggregation("mean")


def test_advantage_estimators_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # two groups of 4
    # rloo: r_i minus the mean of the other three
    rloo = advantages_of(r, 4, "rloo")
    assert rloo.tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -1.0, 1 / 3])
    # reinforce_pp: group-centred, then normalized over the batch
    centred = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25])
    expected = (centred - centred.mean()) / (centred.std() + 1e-4)
    assert torch.allclose(advantages_of(r, 4, "reinforce_pp"), expected)
    # grpo: group-centred and group-scaled
    std0 = torch.tensor([1.0, 0, 0, 0]).std().item()
    assert advantages_of(r, 4, "grpo")[0].item() == pytest.approx(0.75 / (std0 + 1e-4))
    with pytest.raises(ConfigError, match="grpo, rloo, reinforce_pp"):
        advantages_of(r, 4, "ppo")  # type: ignore[arg-type]


def test_overlong_penalty_by_hand():
    # max 10 tokens, buffer 4: free up to 6, then -1/4 per token, -1 at the limit
    lengths = torch.tensor([3, 6, 7, 9, 10])
    assert overlong_penalty(lengths, 10, 4).tolist() == pytest.approx([0, 0, -0.25, -0.75, -1.0])
    assert overlong_penalty(lengths, 10, 0).tolist() == [0, 0, 0, 0, 0]


def _mismatch_case():
    # trainer minus sampler log-probs: row 0 (+log 3, -log 2), row 1 (+log 1.5, pad)
    sampler = torch.tensor([[-1.0, -1.0], [-2.0, -5.0]])
    trainer = sampler + torch.tensor([[math.log(3.0), -math.log(2.0)], [math.log(1.5), 7.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    return trainer, sampler, mask


def test_mismatch_statistics_and_corrections_by_hand():
    trainer, sampler, mask = _mismatch_case()
    none = mismatch(trainer, sampler, mask, "none")
    assert none.weights is None and none.mean_weight == 1.0
    # k3 with w = trainer/sampler probability: (w - 1) - log w, over the 3 real tokens
    k3 = [(w - 1) - math.log(w) for w in (3.0, 0.5, 1.5)]
    assert none.kl == pytest.approx(sum(k3) / 3)
    assert none.max_logp_diff == pytest.approx(math.log(3.0))  # the padded 7.0 is ignored
    token = mismatch(trainer, sampler, mask, "token_tis", cap=2.0)
    assert token.weights[mask.bool()].tolist() == pytest.approx([2.0, 0.5, 1.5])  # 3 capped
    seq = mismatch(trainer, sampler, mask, "sequence_tis", cap=2.0)
    assert seq.weights[:, 0].tolist() == pytest.approx([1.5, 1.5])  # 3 * 0.5, 1.5
    masked = mismatch(trainer, sampler, mask, "sequence_mask", cap=1.4)
    assert masked.weights[:, 0].tolist() == pytest.approx([0.0, 0.0])  # both outside [1/1.4, 1.4]
    assert masked.masked == 1.0
    kept = mismatch(trainer, sampler, mask, "sequence_mask", cap=1.6)
    assert kept.weights[:, 0].tolist() == pytest.approx([1.5, 1.5]) and kept.masked == 0.0
    with pytest.raises(ConfigError, match="token_tis"):
        mismatch(trainer, sampler, mask, "tis")  # type: ignore[arg-type]


def test_correction_weights_multiply_the_policy_term_only():
    logprobs = torch.zeros(1, 2, requires_grad=True)  # on policy: ratio 1
    weights = torch.tensor([[2.0, 0.5]])
    parts = grpo_loss(
        logprobs,
        logprobs.detach(),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        aggregation="dapo",
        weights=weights,
    )
    assert parts.loss.item() == pytest.approx(-(2.0 + 0.5) / 2)
    parts.loss.backward()
    assert torch.allclose(logprobs.grad, torch.tensor([[-1.0, -0.25]]))  # -A * w / tokens


# ---- in the trainer ------------------------------------------------------------------------

from payoff.algos.grpo import GRPO  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm, save_lm  # noqa: E402
from payoff.models.logprobs import completion_logprobs  # noqa: E402
from payoff.rollout.generation import LocalSampler, SamplingConfig  # noqa: E402


def digit_share(prompts, completions, **kwargs):
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def flat_when_even(prompts, completions, **kwargs):
    """1 for every completion of a prompt whose first digit is even (a flat group)."""
    shares = digit_share(prompts, completions)
    return [1.0 if int(p[0]) % 2 == 0 else s for p, s in zip(prompts, shares, strict=True)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("kit") / "model"))


def _settings(model_dir: str, **extra) -> dict:
    settings = {
        "model": {"path": model_dir},
        "rewards": [{"name": f"{__file__}:digit_share"}],
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 4,
        "learning_rate": 1e-3,
        "warmup_steps": 0,
        "eval_every": 100,
        "task": {"eval_size": 8},
    }
    settings.update(extra)
    return settings


def _grpo(model_dir: str, **extra) -> GRPO:
    grpo = GRPO(**_settings(model_dir, **extra))
    grpo.setup()
    return grpo


def _after_one_step(model_dir: str, **extra) -> list[torch.Tensor]:
    """The gradient of the step's (last) optimizer step. Parameters would not do: Adam's
    first step moves every weight by lr * sign(gradient), and a sign flips on float noise."""
    grpo = _grpo(model_dir, **extra)
    grpo.iterate()
    return [p.grad.clone() for p in grpo.trainable]


@pytest.mark.parametrize("how", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_change_memory_not_the_update(model_dir, how):
    whole = _after_one_step(model_dir, loss_aggregation=how)
    parts = _after_one_step(model_dir, loss_aggregation=how, microbatch_size=8)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(whole, parts, strict=True))


def test_bnpo_is_dapo_in_one_micro_batch_and_differs_in_several(model_dir):
    stop = ["1", "2", "3"]  # completions of different lengths: micro-batches' token counts differ
    dapo = _after_one_step(model_dir, loss_aggregation="dapo", stop=stop)
    bnpo = _after_one_step(model_dir, loss_aggregation="bnpo", stop=stop)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(dapo, bnpo, strict=True))
    split = _after_one_step(model_dir, loss_aggregation="bnpo", microbatch_size=4, stop=stop)
    assert not all(torch.allclose(a, b, atol=1e-7) for a, b in zip(dapo, split, strict=True))


def test_dynamic_sampling_fills_the_batch_with_groups_that_carry_signal(model_dir):
    reward = [{"name": f"{__file__}:flat_when_even"}]
    grpo = _grpo(model_dir, rewards=reward, dynamic_sampling=True, prompts_per_step=8)
    for _ in range(2):
        grpo.iterate()
        record = grpo._record
        assert record["train/flat_groups"] == 0.0  # every kept group has reward spread
        assert record["train/dropped_groups"] > 0  # about half the prompts start with an even digit
        assert record["train/sampled_groups"] > 8 and record["train/dynamic_fill"] == 0.0
        assert grpo.samples_seen % (8 * 4) == 0
    # one generation batch allowed: the step is topped up with flat groups, and says so
    capped = _grpo(model_dir, rewards=reward, dynamic_sampling=True, dynamic_sampling_max_batches=1)
    capped.iterate()
    assert capped._record["train/dynamic_fill"] > 0
    assert capped._record["train/flat_groups"] == capped._record["train/dynamic_fill"]


def test_overlong_shaping_and_truncation_masking_in_a_step(model_dir):
    grpo = _grpo(model_dir, overlong_buffer=2, mask_truncated=True)
    grpo.iterate()
    # the untrained model rarely stops: most completions run to 4 tokens and pay -1
    assert grpo._record["reward/overlong"] < -0.5
    assert grpo._record["train/truncated"] > 0.5


def always(prompts, completions, **kwargs):
    """Pays every completion: a reward any answer games."""
    return [1.0 for _ in completions]


def test_the_overlong_penalty_does_not_hide_paid_but_wrong_samples(model_dir):
    """Integrity checks compare what the reward functions paid with the verifier: a
    length penalty on top must not turn a paid wrong answer into an unpaid one."""
    grpo = _grpo(
        model_dir,
        rewards=[{"name": f"{__file__}:always"}],
        overlong_buffer=2,
        default_monitors=True,
    )
    grpo.iterate()
    record = grpo._record
    assert record["reward/overlong"] < -0.5  # most completions run to the limit and pay for it
    assert record["train/reward"] == 1.0  # what the functions paid, unshaped
    assert record["integrity/proxy_only"] == pytest.approx(1.0 - record["train/accuracy"])


def test_dynamic_sampling_keeps_watching_the_groups_it_drops(model_dir):
    """A reward every completion games makes every group flat: dynamic sampling drops them
    all, but the step's reward, accuracy and integrity numbers still see them."""
    grpo = _grpo(
        model_dir,
        rewards=[{"name": f"{__file__}:always"}],
        dynamic_sampling=True,
        dynamic_sampling_max_batches=2,
    )
    grpo.iterate()
    record = grpo._record
    assert record["train/dropped_groups"] == 1.0 and record["train/dynamic_fill"] == 1.0
    assert record["train/sampled_groups"] > 4
    assert record["train/reward"] == 1.0
    assert record["integrity/proxy_only"] == pytest.approx(1.0 - record["train/accuracy"])
    assert record["reward/errors"] == 0.0


def test_micro_batches_leave_the_logged_kl_and_clip_fraction_alone(model_dir):
    settings = {"beta": 0.1, "updates_per_batch": 2, "minibatch_size": 8}  # the ratio moves
    whole = _grpo(model_dir, **settings)
    parts = _grpo(model_dir, microbatch_size=4, **settings)
    for algo in (whole, parts):
        algo.iterate()
        algo.iterate()
    for key in ("train/kl", "train/clip_fraction", "train/loss"):
        assert parts._record[key] == pytest.approx(whole._record[key], rel=1e-4, abs=1e-7), key
    assert whole._record["train/kl"] > 0


def test_an_injected_mismatch_is_measured_and_corrected_as_by_hand(model_dir):
    """The sampler's weights are perturbed: its log-probs differ from the trainer's. The
    logged mismatch_kl and the corrected policy loss equal the hand computation."""
    grpo = _grpo(model_dir, mismatch_correction="token_tis", mismatch_cap=1.5)
    stale, _ = load_lm(ModelConfig(path=model_dir))
    with torch.no_grad():
        for p in stale.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    sampler = LocalSampler(stale, grpo.tokenizer)
    prompts = [grpo.prompt_text(r) for r in grpo.task.sample(grpo.rng, 4) for _ in range(4)]
    generation = sampler.generate(
        prompts, SamplingConfig(1.0, 1.0, 4), torch.Generator().manual_seed(0)
    )
    advantages = torch.linspace(-1, 1, 16)
    with torch.no_grad():
        trainer = completion_logprobs(
            grpo.model,
            generation.prompt_ids,
            generation.prompt_mask,
            generation.completion_ids,
            generation.completion_mask,
            1.0,
        ).logprobs
    mask = generation.completion_mask.float()
    diff = trainer - generation.logprobs
    w = diff.exp()
    kl = (((w - 1) - diff) * mask).sum() / mask.sum()
    weights = w.clamp(max=1.5)
    # on policy (ratio 1), grpo aggregation: mean_i (1/|o_i|) sum_t -A_i * w_it
    per_row = (-(advantages[:, None] * weights) * mask).sum(1) / mask.sum(1)
    stats = grpo.update(generation, advantages)
    assert stats["mismatch_kl"] == pytest.approx(float(kl), rel=1e-4)
    assert stats["mismatch_kl"] > 1e-3
    assert stats["mismatch_max"] == pytest.approx(float((diff.abs() * mask).max()), rel=1e-4)
    assert stats["policy"] == pytest.approx(float(per_row.mean()), rel=1e-4, abs=1e-6)
    # the same batch with no correction: the plain policy gradient, weights 1
    plain = _grpo(model_dir, mismatch_correction="none")
    plain_stats = plain.update(generation, advantages)
    expected_plain = ((-advantages[:, None] * mask).sum(1) / mask.sum(1)).mean()
    assert plain_stats["policy"] == pytest.approx(float(expected_plain), abs=1e-6)
    assert plain_stats["is_weight"] == 1.0


def test_synchronous_sampling_on_this_cpu_has_almost_no_mismatch(model_dir):
    grpo = _grpo(model_dir)
    grpo.iterate()
    assert grpo._record["train/mismatch_kl"] < 1e-6
    assert grpo._record["train/mismatch_max_logp_diff"] < 1e-3
    assert grpo._record["train/staleness"] == 0.0


def test_kit_config_errors_name_the_key_and_the_valid_values(model_dir):
    with pytest.raises(ConfigError, match="microbatch_size"):
        GRPO(model={"path": model_dir}, prompts_per_step=4, group_size=4, microbatch_size=3)
    with pytest.raises(ConfigError, match="overlong_buffer"):
        GRPO(model={"path": model_dir}, max_new_tokens=4, overlong_buffer=4)
    with pytest.raises(ConfigError, match="loss_aggregation"):
        GRPO(model={"path": model_dir}, loss_aggregation="mean")
    with pytest.raises(ConfigError, match="mismatch_correction"):
        GRPO(model={"path": model_dir}, mismatch_correction="tis")
    with pytest.raises(ConfigError, match="mismatch_cap"):
        GRPO(model={"path": model_dir}, mismatch_cap=1.0)
    with pytest.warns(RuntimeWarning, match="not a multiple of group_size 4"):
        GRPO(model={"path": model_dir}, prompts_per_step=4, group_size=4, microbatch_size=2)
    with pytest.warns(RuntimeWarning, match="sampler_threads is ignored"):
        GRPO(model={"path": model_dir}, backend="ray", sampler_threads=2)


# ---- asynchronous generation ---------------------------------------------------------------


def _records(grpo: GRPO) -> list[dict]:
    return [
        {k: v for k, v in r.items() if not k.startswith(("perf/", "async/", "time"))}
        for r in grpo.history
    ]


def test_async_generation_at_staleness_zero_reproduces_synchronous_training(model_dir):
    """The sampler process samples with the learner's generator and weights of this step:
    the same completions, rewards and updates as sampling in the learner's process."""
    common = {"steps": 3, "threads": 1, "log_every": 1}  # 'auto' is no correction here
    sync = GRPO(**_settings(model_dir, **common))
    sync.learn()
    lagless = GRPO(**_settings(model_dir, async_generation=True, max_staleness=0, **common))
    lagless.learn()
    assert _records(lagless) == _records(sync)
    for a, b in zip(sync.trainable, lagless.trainable, strict=True):
        assert torch.equal(a, b)


def test_async_generation_stays_within_its_staleness_bound_and_corrects_for_it(model_dir):
    grpo = GRPO(
        **_settings(
            model_dir, steps=4, threads=1, log_every=1, async_generation=True, max_staleness=1
        )
    )
    grpo.learn()
    records = [r for r in grpo.history if "train/staleness" in r]
    assert [r["train/staleness"] for r in records] == [0.0, 1.0, 1.0, 1.0]
    # one step stale: the sampler's weights are one update behind, and it shows
    stale = records[1:]
    assert all(r["train/mismatch_kl"] > 1e-6 for r in stale)
    assert all(r["train/is_weight"] != 1.0 for r in stale)  # token_tis ('auto' under async)
    assert records[-1]["async/weight_pushes"] >= 3


def test_async_generation_resumes_with_its_seed_stream(tmp_path, model_dir):
    """A stopped asynchronous run resumes: the batches sampled ahead are gone (the first
    resumed step samples afresh, staleness 0), the seed stream of those batches goes on."""
    from payoff.track.run import Run

    settings = _settings(model_dir, threads=1, async_generation=True, checkpoint_every=2)
    run = Run.create(tmp_path, "a", {"algo": "grpo"})
    first = GRPO(run=run, steps=4, **settings)
    first.learn(total=2)
    stream = first.ahead_generator.get_state()
    resumed = GRPO.from_run(run)
    assert resumed.step == 2 and torch.equal(resumed.ahead_generator.get_state(), stream)
    resumed.learn()
    train = [r for r in run.records() if "train/staleness" in r]
    assert [r["train/staleness"] for r in train] == [0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("rewards", "asked"),
    [
        ([{"name": "math"}], False),  # the task's verifier itself: its verdicts are the rewards
        ([{"name": "math", "on_error": -1.0}], True),  # errors scored otherwise
        ([{"name": "math", "weight": 2.0}], True),
        ([{"name": f"{__file__}:digit_share"}], True),
    ],
)
def test_the_verifier_is_asked_only_when_the_rewards_are_not_it(model_dir, rewards, asked):
    from payoff.algos.shared.lm import columns_of

    grpo = _grpo(model_dir, rewards=rewards)
    calls = []
    verifier = grpo.verifier
    grpo.verifier = lambda *a, **k: calls.append(1) or verifier(*a, **k)
    grpo.verifier.specs = verifier.specs  # type: ignore[attr-defined]
    batch, _, _ = grpo.sample_scored(4, ahead=False)
    assert bool(calls) == asked
    expected = verifier(
        [r["prompt"] for r in batch.rows],
        batch.generation.completions,
        **columns_of(batch.rows),
    ).total
    assert batch.correct == expected
