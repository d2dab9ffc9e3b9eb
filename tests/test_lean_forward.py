"""The lean Llama forward equals transformers' own forward bit for bit, and steps aside when
it does not apply."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.models.lean_forward import lean_supported, lm_forward
from payoff.models.lm import ModelConfig, load_lm
from payoff.models.logprobs import completion_logprobs, tokenize_starts
from payoff.models.transformers_compat import cache_kwargs, output_cache
from payoff.rollout.generation import LocalSampler, SamplingConfig


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny_gqa(tiny):
    """The tiny Llama with grouped-query attention (4 query heads on 2 key/value heads), as
    SmolLM2 (9 on 3) and most recent models have it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = {**tiny[0].config.to_dict(), "num_key_value_heads": 2}
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**settings)).eval()
    assert model.model.layers[0].self_attn.num_key_value_groups == 2
    return model, tiny[1]


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


@pytest.mark.parametrize("heads", ["mha", "gqa"])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_prefill_chunk_and_decode_equal_transformers_bitwise(request, training, padded, heads):
    model, _ = request.getfixturevalue("tiny" if heads == "mha" else "tiny_gqa")
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
    # Grouped log-probs: the lean forward packs each group into one row, transformers runs
    # the prompts and then the completions on their cache; equal to float rounding.
    mask = g1.completion_mask.bool()
    torch.testing.assert_close(out1.logprobs[mask], out0.logprobs[mask], rtol=1e-5, atol=1e-5)
    for a, b in zip(grads1, grads0, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("temperature", "heads"), [(1.0, "mha"), (0.7, "mha"), (1.0, "gqa")])
def test_packed_groups_equal_the_two_pass_forward(request, monkeypatch, temperature, heads):
    """One packed row per group against prompts-then-completions on the cache: prompts of
    different lengths (left-padded), completions of every length from 0 (a masked row) to
    the full width, log-probs, entropies and gradients."""
    model, _ = request.getfixturevalue("tiny" if heads == "mha" else "tiny_gqa")
    model.train()
    generator = torch.Generator().manual_seed(5)
    groups, group, width = 3, 4, 5
    prompt_ids = torch.randint(3, 40, (groups, 6), generator=generator)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[0, :2] = 0
    prompt_mask[2, :4] = 0
    prompt_ids = prompt_ids.masked_fill(prompt_mask == 0, 0).repeat_interleave(group, 0)
    prompt_mask = prompt_mask.repeat_interleave(group, 0)
    completion_ids = torch.randint(3, 40, (groups * group, width), generator=generator)
    lengths = torch.tensor([5, 3, 1, 0, 2, 5, 4, 4, 0, 0, 0, 0])  # the third group all masked
    completion_mask = (torch.arange(width)[None] < lengths[:, None]).long()
    runs = {}
    for lean in ("1", "0"):
        monkeypatch.setenv("PAYOFF_LEAN_FORWARD", lean)
        out = completion_logprobs(
            model,
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            temperature,
            with_entropy=True,
            group_size=group,
        )
        weights = torch.linspace(0.5, 1.5, width)  # every token its own weight in the loss
        loss = (out.logprobs * completion_mask * weights).sum()
        runs[lean] = (out, torch.autograd.grad(loss, list(model.parameters())))
    (packed, packed_grads), (two_pass, two_pass_grads) = runs["1"], runs["0"]
    mask = completion_mask.bool()
    assert packed.logprobs.shape == two_pass.logprobs.shape == (12, width)
    torch.testing.assert_close(packed.logprobs[mask], two_pass.logprobs[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed.entropy[mask], two_pass.entropy[mask], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(packed.logprobs).all()  # masked positions too: 0 * them stays 0
    for a, b in zip(packed_grads, two_pass_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    model.eval()


def test_rows_that_do_not_pack_take_the_two_pass_way(tiny, monkeypatch):
    """A completion mask with a hole, prompts that differ inside a group, or a row longer
    than the limit: no packing."""
    from payoff.models.logprobs import _packed_group_logits

    model, _ = tiny
    prompt_ids = torch.randint(3, 40, (4, 3))
    prompt_ids[1] = prompt_ids[0]
    prompt_ids[3] = prompt_ids[2]
    prompt_mask = torch.ones_like(prompt_ids)
    completion_ids = torch.randint(3, 40, (4, 3))
    prompts = (prompt_ids, prompt_mask)
    holed = torch.tensor([[1, 0, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]])
    assert _packed_group_logits(model, prompts, (completion_ids, holed), 2) is None
    prefix = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [0, 0, 0]])
    assert _packed_group_logits(model, prompts, (completion_ids, prefix), 2) is not None
    assert _packed_group_logits(model, prompts, (completion_ids, prefix), 4) is None
    monkeypatch.setattr("payoff.models.logprobs.PACKED_ROW_LIMIT", 4)  # its rows hold 5 tokens
    assert _packed_group_logits(model, prompts, (completion_ids, prefix), 2) is None


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
        rows = tokenize_starts(tokenizer, prompts)
        plain = sampler._generate(rows, sampling, torch.Generator().manual_seed(4))
    fast = sampler.generate(prompts, sampling, torch.Generator().manual_seed(4))
    assert not fast.logprobs.is_inference()  # usable in a learner's backward pass
    assert fast.completions == plain.completions
    for name in ("prompt_ids", "completion_ids", "completion_mask", "logprobs", "truncated"):
        assert torch.equal(getattr(fast, name), getattr(plain, name)), name


def test_finished_rows_leave_the_decode_passes_without_changing_the_samples(tiny, monkeypatch):
    """Sampling drops rows that have ended (EOS or, here with an untrained model, a stop
    string) from the forward passes (the lean cache's rows); the tokens, log-probs and
    random stream are those of decoding every row to the end."""
    import payoff.rollout.generation as generation

    model, tokenizer = tiny
    prompts = [p for p in ("12+34=", "7+5=", "99+1=") for _ in range(4)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8, stop=["1", "5", "+"])
    runs = {}
    forwards: list[int] = []
    real_forward = generation.lm_forward

    def counting(model, ids, *args, **kwargs):
        forwards.append(ids.shape[0])
        return real_forward(model, ids, *args, **kwargs)

    monkeypatch.setattr(generation, "lm_forward", counting)
    for mode in ("compact", "every row"):
        if mode == "every row":  # not the lean cache: every row runs to the end
            monkeypatch.setattr(generation, "KVCache", type("NotTheLeanCache", (), {}))
        forwards.clear()
        generator = torch.Generator().manual_seed(7)
        g = LocalSampler(model, tokenizer).generate(prompts, sampling, generator)
        runs[mode] = (g, list(forwards), torch.rand(2, generator=generator))
    (fast, fast_rows, fast_next), (full, full_rows, full_next) = runs["compact"], runs["every row"]
    lengths = fast.completion_mask.sum(1)
    assert len(set(lengths.tolist())) > 1  # rows finished at different steps
    assert fast.completions == full.completions
    assert torch.equal(fast.completion_ids, full.completion_ids)
    torch.testing.assert_close(fast.logprobs, full.logprobs, rtol=1e-5, atol=1e-6)
    assert torch.equal(fast_next, full_next)  # the generator ends in the same place
    assert set(full_rows) == {12} and min(fast_rows) < 12  # finished rows left the passes
