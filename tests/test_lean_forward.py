"""The lean Llama forward equals transformers' own forward bit for bit, and steps aside when
it does not apply."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.models.lean_forward import lean_supported, lm_forward
from payoff.models.lm import ModelConfig, load_lm
from payoff.models.logprobs import completion_logprobs
from payoff.models.transformers_compat import cache_kwargs, output_cache
from payoff.rollout.generation import LocalSampler, SamplingConfig


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return model, tokenizer


def _hf(model, ids, mask, positions, cache=None, keep=0):
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=keep,
        **({} if cache is None else cache_kwargs(model, cache)),
    )
    return out.logits, output_cache(out)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_prefill_chunk_and_decode_equal_transformers_bitwise(tiny, training, padded):
    model, _ = tiny
    model.train(training)
    assert lean_supported(model)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 40, (4, 6), generator=generator)
    mask = torch.ones_like(ids)
    if padded:  # left padding of different widths
        mask[0, :2] = 0
        mask[2, :1] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    hf, hf_cache = _hf(model, ids, mask, positions, keep=1)
    lean, cache = lm_forward(model, ids, mask, positions, use_cache=True, logits_to_keep=1)
    assert torch.equal(hf, lean)
    # A chunk of 3 tokens on the cache (the loss's completion pass; one padded after EOS).
    chunk = torch.randint(3, 40, (4, 3), generator=generator)
    chunk_mask = torch.cat([mask, torch.tensor([[1, 1, 0]] * 4)], 1)
    chunk_positions = positions[:, -1:] + torch.arange(1, 4)
    hf2, hf_cache = _hf(model, chunk, chunk_mask, chunk_positions, hf_cache)
    lean2, cache = lm_forward(model, chunk, chunk_mask, chunk_positions, cache)
    assert torch.equal(hf2, lean2)
    # One decode step.
    step_mask = torch.cat([chunk_mask, torch.ones(4, 1, dtype=torch.long)], 1)
    step_positions = chunk_positions[:, -1:] + 1
    hf3, _ = _hf(model, chunk[:, :1], step_mask, step_positions, hf_cache)
    lean3, _ = lm_forward(model, chunk[:, :1], step_mask, step_positions, cache)
    assert torch.equal(hf3, lean3)
    if training:  # gradients through the cache, into every parameter
        params = [p for p in model.parameters() if p.requires_grad]
        hf_grads = torch.autograd.grad((hf2.sum() + hf3.sum()), params)
        lean_grads = torch.autograd.grad((lean2.sum() + lean3.sum()), params)
        assert all(torch.equal(a, b) for a, b in zip(hf_grads, lean_grads, strict=True))
    model.eval()


def test_sampling_and_grouped_logprobs_are_unchanged(tiny, monkeypatch):
    model, tokenizer = tiny
    prompts = [p for p in ("12+34=", "7+5=", "99+1=") for _ in range(4)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=5)
    results = {}
    for lean in ("1", "0"):
        monkeypatch.setenv("PAYOFF_LEAN_FORWARD", lean)
        assert lean_supported(model) is (lean == "1")
        generator = torch.Generator().manual_seed(3)
        g = LocalSampler(model, tokenizer).generate(prompts, sampling, generator)
        model.train()
        out = completion_logprobs(
            model,
            g.prompt_ids,
            g.prompt_mask,
            g.completion_ids,
            g.completion_mask,
            with_entropy=True,
            group_size=4,
        )
        grads = torch.autograd.grad((out.logprobs * g.completion_mask).sum(), model.parameters())
        model.eval()
        results[lean] = (g, out, grads)
    (g1, out1, grads1), (g0, out0, grads0) = results["1"], results["0"]
    assert g1.completions == g0.completions
    assert torch.equal(g1.completion_ids, g0.completion_ids)
    assert torch.equal(g1.logprobs, g0.logprobs)
    assert torch.equal(out1.logprobs, out0.logprobs)
    assert all(torch.equal(a, b) for a, b in zip(grads1, grads0, strict=True))


def test_steps_aside_for_what_it_does_not_know(tiny):
    model, _ = tiny
    handle = model.register_forward_hook(lambda *args: None)
    try:
        assert not lean_supported(model)  # hooks expect model(...) itself
        ids = torch.tensor([[5, 6, 7]])
        logits, cache = lm_forward(model, ids, torch.ones_like(ids), torch.arange(3)[None])
        assert logits.shape == (1, 3, model.config.vocab_size) and cache is None
    finally:
        handle.remove()
    assert lean_supported(model)
    eager = type(model)(model.config.__class__(**{**model.config.to_dict()}))
    eager.config._attn_implementation = "eager"
    assert not lean_supported(eager)


def test_inference_mode_sampling_equals_no_grad_sampling(tiny):
    model, tokenizer = tiny
    prompts = [p for p in ("12+34=", "7+5=") for _ in range(4)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=5)
    sampler = LocalSampler(model, tokenizer)
    with torch.no_grad():
        plain = sampler._generate(prompts, sampling, torch.Generator().manual_seed(4))
    fast = sampler.generate(prompts, sampling, torch.Generator().manual_seed(4))
    assert not fast.logprobs.is_inference()  # usable in a learner's backward pass
    assert fast.completions == plain.completions
    for name in ("prompt_ids", "completion_ids", "completion_mask", "logprobs", "truncated"):
        assert torch.equal(getattr(fast, name), getattr(plain, name)), name
