"""Units of the LLM stack: tokenizer, tiny model, sampler, GRPO loss by hand, tasks, data errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.grpo import GRPOConfig
from payoff.algos.shared.group import aggregate, group_advantages, grpo_loss
from payoff.algos.shared.kl import kl_k1, kl_k3
from payoff.algos.shared.lm import pass_at_k
from payoff.core.config import from_dict
from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks import TaskConfig, make_task, read_rows
from payoff.models.lm import ModelConfig, count_parameters, load_lm
from payoff.models.logprobs import completion_logprobs
from payoff.rollout.generation import LocalSampler, SamplingConfig, repeated_group_size


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return model, tokenizer


# ---- tokenizer and model ----------------------------------------------------------------


def test_char_tokenizer_round_trips_through_hf_files(tmp_path, tiny):
    from transformers import AutoTokenizer

    _, tokenizer = tiny
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "12+34=46\n<think>a b</think><answer>7</answer>"
    ids = loaded(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert loaded.decode(ids) == text
    assert loaded.padding_side == "left" and loaded.pad_token_id == tokenizer.pad_token_id


def test_tiny_model_is_about_a_million_parameters(tiny):
    model, _ = tiny
    assert 0.9e6 < count_parameters(model) < 1.2e6


# ---- generation ---------------------------------------------------------------------------


def test_sampler_logprobs_match_a_full_forward_pass(tiny):
    model, tokenizer = tiny
    sampler = LocalSampler(model, tokenizer)
    out = sampler.generate(
        ["12+34=", "7+8=", "100+1="],
        SamplingConfig(max_new_tokens=6),
        torch.Generator().manual_seed(0),
    )
    assert out.completion_ids.shape == out.logprobs.shape == out.completion_mask.shape
    with torch.no_grad():
        full = completion_logprobs(
            model, out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask
        ).logprobs
    assert torch.allclose(full * out.completion_mask, out.logprobs, atol=1e-4)


def test_grouped_prompts_share_one_prompt_pass_with_the_same_results(tiny):
    """Rows in groups of G identical prompts: one prompt pass per group, same numbers."""
    model, tokenizer = tiny
    prompts = [p for p in ["12+34=", "7+8=", "100+1="] for _ in range(4)]
    assert repeated_group_size(prompts) == 4
    assert repeated_group_size(prompts[1:]) == 1 and repeated_group_size(["a", "b"]) == 1
    sampler = LocalSampler(model, tokenizer)
    out = sampler.generate(
        prompts, SamplingConfig(max_new_tokens=6), torch.Generator().manual_seed(0)
    )
    assert torch.equal(out.prompt_ids[::4].repeat_interleave(4, 0), out.prompt_ids)
    args = (out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask)
    model.zero_grad()
    plain = completion_logprobs(model, *args)
    (plain.logprobs * out.completion_mask).sum().backward()
    plain_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    shared = completion_logprobs(model, *args, group_size=4)
    (shared.logprobs * out.completion_mask).sum().backward()
    mask = out.completion_mask
    assert torch.allclose(plain.logprobs * mask, shared.logprobs * mask, atol=1e-4)
    assert torch.allclose(out.logprobs, shared.logprobs.detach() * mask, atol=1e-4)
    for a, b in zip(plain_grads, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(a, b, atol=1e-3 * (1 + float(a.abs().max())))
    model.zero_grad()
    with pytest.raises(ValueError, match="consecutive groups of 3"):
        completion_logprobs(model, *args, group_size=3)


def test_sampling_is_seeded_and_greedy_is_deterministic(tiny):
    model, tokenizer = tiny
    sampler = LocalSampler(model, tokenizer)
    prompts = ["1+1=", "22+22="] * 4
    a = sampler.generate(
        prompts, SamplingConfig(max_new_tokens=5), torch.Generator().manual_seed(3)
    )
    b = sampler.generate(
        prompts, SamplingConfig(max_new_tokens=5), torch.Generator().manual_seed(3)
    )
    assert torch.equal(a.completion_ids, b.completion_ids)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=5)
    assert (
        sampler.generate(prompts, greedy).completions
        == sampler.generate(prompts, greedy).completions
    )


def test_masks_stop_after_eos_and_stop_strings(tiny):
    model, tokenizer = tiny
    # Make EOS overwhelmingly likely after one token, so every row stops at step 2.
    sampler = LocalSampler(model, tokenizer)
    with torch.no_grad():
        bias = model.lm_head.weight  # tied with the embeddings
        saved = bias[tokenizer.eos_token_id].clone()
        model.model.embed_tokens.weight[tokenizer.eos_token_id] *= 0
    try:
        out = sampler.generate(["1+1="] * 4, SamplingConfig(max_new_tokens=6, temperature=0.5))
    finally:
        with torch.no_grad():
            model.model.embed_tokens.weight[tokenizer.eos_token_id] = saved
    for row_ids, row_mask in zip(out.completion_ids, out.completion_mask, strict=True):
        eos = (row_ids == tokenizer.eos_token_id).nonzero()
        if len(eos):  # everything after the first EOS is padding with mask 0
            first = int(eos[0])
            assert row_mask[: first + 1].all() and not row_mask[first + 1 :].any()
    # A stop string ends the row and is kept in the text.
    generator = torch.Generator().manual_seed(0)
    free = sampler.generate(["9+9="] * 8, SamplingConfig(max_new_tokens=8), generator)
    stop = free.completions[0][1]  # the second character the model wrote in row 0
    generator = torch.Generator().manual_seed(0)
    cut = sampler.generate(["9+9="] * 8, SamplingConfig(max_new_tokens=8, stop=[stop]), generator)
    assert cut.completions[0] == free.completions[0][: free.completions[0].index(stop) + 1]
    assert int(cut.completion_mask[0].sum()) == len(cut.completions[0])
    assert not bool(cut.truncated[0])


def test_top_p_keeps_only_the_nucleus():
    from payoff.rollout.generation import sample_next

    logits = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]]))
    generator = torch.Generator().manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 0.8, generator)[0]) for _ in range(200)}
    assert draws == {0, 1}


# ---- GRPO math, by hand ---------------------------------------------------------------------


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    scaled = group_advantages(rewards, 4, scale=True, eps=1e-8)
    # group 1: mean 0.25, unbiased std 0.5; group 2 is flat and carries no signal
    assert torch.allclose(scaled, torch.tensor([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0]))
    centred = group_advantages(rewards, 4, scale=False)
    assert torch.allclose(centred, torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]))
    with pytest.raises(ValueError):
        group_advantages(rewards, 3)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([0.0, -1.0]), torch.tensor([math.log(2.0), -1.0])
    assert torch.allclose(kl_k3(logp, ref), torch.tensor([2 - math.log(2) - 1, 0.0]))
    assert torch.allclose(kl_k1(logp, ref), torch.tensor([-math.log(2), 0.0]))


def _hand_case():
    ratios = torch.tensor([[1.5, 0.5], [1.0, 1.1]])
    logprobs = ratios.log().requires_grad_(True)
    old = torch.zeros(2, 2)
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1], [1, 0]])
    return logprobs, old, advantages, mask


def test_grpo_loss_clipping_and_aggregation_by_hand():
    logprobs, old, advantages, mask = _hand_case()
    # per token: row 0 (A=+1): min(1.5, 1.2) = 1.2 -> -1.2 ; min(0.5, 0.8) = 0.5 -> -0.5
    #            row 1 (A=-1): min(-1, -1) -> +1.0 ; masked
    seq = grpo_loss(logprobs, old, advantages, mask, aggregation="sequence")
    assert seq.loss.item() == pytest.approx(((-1.2 - 0.5) / 2 + 1.0) / 2)
    token = grpo_loss(logprobs, old, advantages, mask, aggregation="token")
    assert token.loss.item() == pytest.approx((-1.2 - 0.5 + 1.0) / 3)
    dr = grpo_loss(logprobs, old, advantages, mask, aggregation="dr_grpo", max_tokens=2)
    assert dr.loss.item() == pytest.approx((-1.2 - 0.5 + 1.0) / (2 * 2))
    assert token.clip_fraction.item() == pytest.approx(1 / 3)  # only the 1.5 ratio with A > 0
    # Gradients: the clipped token gets none; the others get -A * ratio / tokens.
    token.loss.backward()
    assert torch.allclose(logprobs.grad, torch.tensor([[0.0, -0.5 / 3], [1.0 / 3, 0.0]]))


def test_grpo_loss_asymmetric_clip_and_kl_by_hand():
    logprobs, old, advantages, mask = _hand_case()
    # clip_high 0.6 lets the 1.5 ratio through unclipped: row 0 token 0 -> -1.5
    loose = grpo_loss(
        logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.6, aggregation="token"
    )
    assert loose.loss.item() == pytest.approx((-1.5 - 0.5 + 1.0) / 3)
    assert loose.clip_fraction.item() == 0.0
    # k3 KL: ref higher by log 2 on two tokens (one masked) -> 2 - log 2 - 1 on one counted token
    shift = torch.tensor([[math.log(2.0), 0.0], [0.0, math.log(2.0)]])
    ref = logprobs.detach() + shift
    k3 = 2 - math.log(2) - 1
    with_kl = grpo_loss(
        logprobs, old, advantages, mask, ref_logprobs=ref, beta=0.1, aggregation="sequence"
    )
    assert with_kl.kl.item() == pytest.approx(k3 / 3)
    assert with_kl.loss.item() == pytest.approx(((-1.2 + 0.1 * k3 - 0.5) / 2 + 1.0) / 2)


def test_on_policy_ratio_gives_the_plain_policy_gradient():
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss = grpo_loss(logprobs, logprobs.detach(), torch.tensor([2.0]), torch.ones(1, 2)).loss
    loss.backward()
    assert loss.item() == pytest.approx(-2.0)
    assert torch.allclose(logprobs.grad, torch.tensor([[-1.0, -1.0]]))  # -A / tokens


def test_aggregate_rejects_unknown_mode():
    with pytest.raises(ConfigError, match="valid: grpo, dapo"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean")  # type: ignore[arg-type]


def test_pass_at_k():
    assert pass_at_k(8, 0, 1) == 0.0
    assert pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)
    assert pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)


def test_grpo_config_checks_explain_themselves():
    with pytest.raises(ConfigError, match="group_size' must be >= 2"):
        from_dict(GRPOConfig, {"group_size": 1})
    with pytest.raises(ConfigError, match="does not divide"):
        from_dict(GRPOConfig, {"prompts_per_step": 4, "group_size": 3, "minibatch_size": 5})
    with pytest.raises(ConfigError, match="loss_aggregation"):
        from_dict(GRPOConfig, {"loss_aggregation": "mean"})
    # 0 turns evaluation during training off, as for PPO or DQN (the final one still runs)
    assert from_dict(GRPOConfig, {"eval_every": 0}).eval_every == 0
    with pytest.raises(ConfigError, match="eval_every' must be >= 0"):
        from_dict(GRPOConfig, {"eval_every": -1})


# ---- tasks and data ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["addition", "multiplication", "countdown", "sorting", "python"])
def test_test_split_never_overlaps_training_and_ood_is_harder(name):
    task = make_task(TaskConfig(name=name))
    train_keys = {row["key"] for row in task.sample(np.random.default_rng(0), 2000)}
    test = task.split("test", 20)
    assert test and not train_keys & {row["key"] for row in test}
    assert task.split("test", 20) == test  # fixed
    ood = task.split("ood", 20)
    assert len(ood[0]["prompt"]) > np.mean([len(r["prompt"]) for r in test]) - 1


def test_generated_rows_score_one_with_their_own_verifier():
    from payoff.rewards.base import RewardMix, RewardSpec

    for name in ["addition", "multiplication", "countdown", "sorting", "python"]:
        task = make_task(TaskConfig(name=name))
        rows = task.sample(np.random.default_rng(1), 6)
        columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
        mix = RewardMix([RewardSpec(name=task.default_rewards[0])])
        result = mix([r["prompt"] for r in rows], [r["answer"] for r in rows], **columns)
        assert result.total == [1.0] * 6, name


def test_task_options_are_checked():
    with pytest.raises(ConfigError, match="unknown config key 'task.options.digts'.*digits"):
        make_task(TaskConfig(name="addition", options={"digts": 3}))
    with pytest.raises(ConfigError, match="unknown task 'additon'.*addition"):
        from_dict(TaskConfig, {"name": "additon"})


def test_jsonl_rows_pass_extra_columns_and_errors_name_file_and_line(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(
        '{"prompt": "2+2=", "answer": 4, "source": "hand"}\n\n{"prompt": "3+3=", "answer": "6"}\n'
    )
    rows = read_rows(good)
    assert rows[0]["answer"] == "4" and rows[0]["source"] == "hand"
    task = make_task(TaskConfig(name="jsonl", data=str(good), test_data=str(good)))
    assert task.sample(np.random.default_rng(0), 3)[0]["prompt"] in ("2+2=", "3+3=")
    for text, message in [
        (
            '{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": 2',
            "bad.jsonl:2: not valid JSON",
        ),
        ('{"answer": "1"}', "bad.jsonl:1: missing a non-empty string 'prompt'"),
        ('{"prompt": "x"}\n{"prompt": "y", "answer": "1"}', "bad.jsonl:2: has a reference"),
        ("[1, 2]", "bad.jsonl:1: each line must be a JSON object"),
    ]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(DataError, match=message):
            read_rows(bad)


def test_lora_trains_adapters_only_and_saves_merged(tmp_path):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_lm(ModelConfig(lora_rank=4), seed=0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable < 0.2 * count_parameters(model)
    with torch.no_grad():  # move the adapters off zero so merging changes the weights
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    from payoff.models.lm import save_lm

    folder = save_lm(model, tokenizer, tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(folder)
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, model(input_ids=ids).logits, atol=1e-4)
    # the adapter alone is not a model: the message points at the merged one beside it
    with pytest.raises(ConfigError, match="holds a LoRA adapter .* use '.*merged'"):
        load_lm(ModelConfig(path=str(folder / "adapter")))
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "adapter_config.json").write_text('{"base_model_name_or_path": "my/base"}')
    with pytest.raises(ConfigError, match="merge_and_unload.*its base model: 'my/base'"):
        load_lm(ModelConfig(path=str(alone)))


def test_lora_reference_is_the_model_with_its_adapters_off():
    """A LoRA run's KL reference keeps no second copy of the weights, yet stays the start."""
    from payoff.models.lm import FrozenReference

    model, tokenizer = load_lm(ModelConfig(lora_rank=4), seed=0)
    model.train()
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        start = model(input_ids=ids).logits.clone()
    reference = FrozenReference(model)
    assert reference.shares_weights and reference.state_dict() is None
    with torch.no_grad():  # training moves the adapters off zero
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
        moved = model(input_ids=ids).logits
        with reference.model() as ref:
            assert not ref.training
            assert torch.allclose(ref(input_ids=ids).logits, start, atol=1e-6)
    assert not torch.allclose(moved, start, atol=1e-3)
    assert model.training  # the mode comes back after the block
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, moved)  # adapters back on
    # Full fine-tuning keeps a frozen copy that training does not move.
    plain, _ = load_lm(ModelConfig(), seed=0)
    copy_reference = FrozenReference(plain)
    assert not copy_reference.shares_weights
    with torch.no_grad():
        next(plain.parameters()).add_(1.0)
        with copy_reference.model() as ref:
            assert not torch.equal(next(ref.parameters()), next(plain.parameters()))


def test_sft_teaches_a_rows_demonstration_and_checks_its_answer():
    from payoff.algos.sft import SFT

    sft = SFT(task={"name": "addition", "options": {"show_working": True}}, steps=1)
    row = sft.task.sample(np.random.default_rng(0), 1)[0]
    assert row["demonstration"].endswith(f"= {row['answer']}") and " + " in row["demonstration"]
    labels = [t for t in sft.batch([row])["labels"][0].tolist() if t != -100]
    taught = sft.tokenizer.decode(labels, skip_special_tokens=True)
    assert taught.strip() == row["demonstration"]  # the worked reply, not the bare answer
