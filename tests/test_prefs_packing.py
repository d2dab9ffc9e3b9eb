"""Packed shared-prompt forward passes (DPO and reward-model training) equal the padded ones."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.dpo import encode_pairs, packed_pair_logprobs, summed_completion_logprobs
from payoff.algos.reward_model import encode_groups, score_packed
from payoff.models.lm import ModelConfig, load_lm
from payoff.models.logprobs import (
    pack_shared_prompts,
    packed_completion_logprobs,
)
from payoff.rewards.learned import ScalarHeadModel

ROWS = [
    {"prompt": "3+4=", "chosen": "7", "rejected": "What a great question! 9"},
    {"prompt": "12+30=", "chosen": "Sure! 42", "rejected": "41"},
    {"prompt": "1+1=", "chosen": "2", "rejected": "Good question! 2"},
    {"prompt": "9+9=", "chosen": "18", "rejected": "Great! 19"},
]


@pytest.fixture(scope="module")
def tiny():
    return load_lm(ModelConfig(), seed=0)


def _grads(model) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    return grads


def _assert_same_grads(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(x, y, atol=1e-4 * (1 + float(x.abs().max())))


@pytest.mark.parametrize("row_tokens", [16, 128])  # one pair per row / all pairs in one row
def test_packed_pair_logprobs_equal_padded_ones_with_gradients(tiny, row_tokens):
    model, tokenizer = tiny
    model.zero_grad()
    prompts = [r["prompt"] for r in ROWS]
    padded = summed_completion_logprobs(
        model,
        tokenizer,
        prompts + prompts,
        [r["chosen"] for r in ROWS] + [r["rejected"] for r in ROWS],
    )
    padded = torch.stack(padded.chunk(2), 1)  # [N, 2]
    padded.sum().backward()
    padded_grads = _grads(model)

    pairs = encode_pairs(tokenizer, ROWS)
    pack = pack_shared_prompts(
        [p for p, _ in pairs], [c for _, c in pairs], tokenizer.pad_token_id, row_tokens
    )
    assert (pack.input_ids.shape[0] > 1) == (row_tokens == 16)
    packed = packed_completion_logprobs(model, pack).view(-1, 2)
    packed.sum().backward()
    assert torch.allclose(packed, padded, atol=1e-4)
    _assert_same_grads(padded_grads, _grads(model))
    # the prompt is laid out once per pair: fewer tokens than prompt + completion per row
    assert (pack.input_ids != tokenizer.pad_token_id).sum() < sum(
        2 * len(p) + len(c) + len(r) for p, (c, r) in pairs
    )
    assert torch.allclose(packed_pair_logprobs(model, pairs, tokenizer.pad_token_id), packed)


def test_packed_logprobs_refuse_a_missing_prompt(tiny):
    model, tokenizer = tiny
    pack = pack_shared_prompts([[]], [[[5, 6], [7]]], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="without a prompt"):
        packed_completion_logprobs(model, pack)


def test_packed_reward_scores_equal_padded_ones_with_gradients(tiny):
    model, tokenizer = tiny
    torch.manual_seed(0)
    rm = ScalarHeadModel(model, tokenizer)
    rm.zero_grad()
    prompts = [r["prompt"] for r in ROWS]
    completions = [(r["chosen"], r["rejected"]) for r in ROWS]
    padded = rm.score(prompts + prompts, [c for c, _ in completions] + [r for _, r in completions])
    padded = torch.stack(padded.chunk(2), 1)
    padded.sum().backward()
    padded_grads = _grads(rm)

    groups = encode_groups(rm, prompts, completions)
    assert all(len(prompt) > 0 for prompt, _ in groups)  # a char tokenizer always splits
    # a group the tokenizer would not split: whole sequences, empty prompt, same scores
    groups[1] = ([], [groups[1][0] + c for c in groups[1][1]])
    packed = score_packed(rm, groups).view(-1, 2)
    packed.sum().backward()
    assert torch.allclose(packed, padded, atol=1e-4)
    _assert_same_grads(padded_grads, _grads(rm))


def test_tokenizing_once_per_distinct_text_gives_the_same_ids(tiny):
    from payoff.models.logprobs import tokenize_unique

    _, tokenizer = tiny
    texts = ["3+4=", "12+30=", "3+4=", "Sure! 42", "3+4="]
    direct = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert tokenize_unique(tokenizer, texts) == direct
