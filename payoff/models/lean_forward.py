"""A lean forward pass for transformers' Llama: the same modules and kernels, less framework.

A tiny model's forward pass on a CPU is mostly framework work, not arithmetic: at 64 rows
of payoff's 1M-parameter Llama a decode step spends ~40% of its time in transformers'
wrappers (output capturing, kwarg deprecation, mask construction, cache classes) rather
than in the matrix products. `lm_forward` runs the same computation by calling the model's
own submodules (embedding, rotary embedding, norms, projections, MLPs, head) and the same
`scaled_dot_product_attention` call with the same mask transformers builds, so its logits
and gradients equal `model(...)`'s bit for bit (tests/test_lean_forward.py). Any model it
does not know (another architecture, a peft wrapper, eager or flash attention, activation
checkpointing, forward hooks on the model) goes through `model(...)` unchanged. Grouped-query
attention (SmolLM2's 9 query heads on 3 key/value heads) is shared as transformers' SDPA
path shares it (`_attend`). `PAYOFF_LEAN_FORWARD=0` turns it off.

    logits, cache = lm_forward(model, ids, mask, positions, use_cache=True)   # prefill
    logits, cache = lm_forward(model, next_ids, mask, next_positions, cache)  # decode
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.nn import functional as F

from payoff.core.errors import ConfigError
from payoff.models.transformers_compat import cache_kwargs, output_cache


class KVCache:
    """Keys and values per layer, [B, heads, S, head_dim] each; a step appends along S.

    The same layout and concatenation as transformers' DynamicCache, without its
    per-call bookkeeping. Gradients flow through it when the forward that filled it had them.
    """

    def __init__(self, layers: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    def length(self) -> int:
        """Tokens held (0 when empty)."""
        keys = self.keys[0]
        return 0 if keys is None else keys.shape[-2]

    def update(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        old_keys, old_values = self.keys[layer], self.values[layer]
        if old_keys is not None and old_values is not None:
            keys = torch.cat([old_keys, keys], dim=-2)
            values = torch.cat([old_values, values], dim=-2)
        self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def select(self, rows: torch.Tensor) -> None:
        """Keep only these rows (a sampler dropping the rows that have finished)."""
        self.keys = [None if k is None else k.index_select(0, rows) for k in self.keys]
        self.values = [None if v is None else v.index_select(0, rows) for v in self.values]

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Each row `repeats` times in a row (a prompt's cache shared by its G samples)."""
        self.keys = [None if k is None else k.repeat_interleave(repeats, 0) for k in self.keys]
        self.values = [None if v is None else v.repeat_interleave(repeats, 0) for v in self.values]


def lean_supported(model: Any) -> bool:
    """True when `lm_forward` computes `model`'s forward itself (see the module docstring)."""
    if os.environ.get("PAYOFF_LEAN_FORWARD", "1") == "0":
        return False
    try:
        from transformers import LlamaForCausalLM
    except ImportError:  # pragma: no cover - transformers is the llm extra
        return False
    if type(model) is not LlamaForCausalLM:  # peft wrappers, subclasses, other architectures
        return False
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if model.training and (config.attention_dropout or _llama_checkpointing(model)):
        return False
    # Hooks on the outer modules (autocast, user instrumentation) expect model(...) itself.
    if torch.nn.modules.module._global_forward_hooks:
        return False
    return not any(m._forward_hooks or m._forward_pre_hooks for m in (model, model.model))


def _llama_checkpointing(model: Any) -> bool:
    """`is_checkpointing` for a LlamaForCausalLM in training: transformers sets the flag on
    the decoder and its layers, so those are all to read (walking every module each
    forward is a visible share of a tiny model's step)."""
    body = model.model
    return any(getattr(m, "gradient_checkpointing", False) for m in (body, *body.layers))


def _attention_mask(
    padding: torch.Tensor, queries: int, past: int
) -> tuple[torch.Tensor | None, bool]:
    """SDPA's (attn_mask, is_causal) for `queries` new tokens after `past` cached ones, as
    transformers builds them: no mask when nothing is padded and the causal pattern is
    SDPA's own (one query, or no cache); else a boolean [B, 1, Q, K] mask of keys that are
    real tokens at or before each query's cache index."""
    keys = padding.shape[1]
    if (queries == 1 or keys == queries) and bool(padding.all()):
        return None, queries > 1
    query_index = torch.arange(past, past + queries, device=padding.device)
    key_index = torch.arange(keys, device=padding.device)
    causal = key_index[None, :] <= query_index[:, None]  # [Q, K]
    return (causal[None] & padding.bool()[:, None, :])[:, None], False


def lookup_error(
    model: Any, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None
) -> Exception | None:
    """What an IndexError inside a model's forward means, when it is one of the two usual
    ones: a token id the model's vocabulary lacks, or a position past its context (learned
    position embeddings, as GPT-2's, end at n_positions)."""
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if vocab is not None and input_ids.numel() and int(input_ids.max()) >= vocab:
        return ConfigError(
            f"token id {int(input_ids.max())} is past the model's vocabulary of {vocab}: the "
            f"tokenizer and the model do not match (save them together, or resize the "
            f"model's embeddings after adding tokens)"
        )
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if position_ids is None:  # positions 0..L-1
        longest = input_ids.shape[-1]
    else:
        longest = int(position_ids.max()) + 1 if position_ids.numel() else 0
    if limit is not None and longest > limit:
        return ConfigError(
            f"a sequence reached {longest} tokens, past the {limit} positions this model "
            f"({getattr(config, 'model_type', type(model).__name__)}) can embed: shorten the "
            f"prompts or answers in the data, lower max_new_tokens, or use a model with a longer "
            f"context"
        )
    return None


@contextmanager
def explained_lookups(
    model: Any, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None
) -> Iterator[None]:
    """Around a model's forward: an IndexError from an embedding lookup past its table
    becomes `lookup_error`'s ConfigError (any other IndexError passes unchanged)."""
    try:
        yield
    except IndexError as err:
        explained = lookup_error(model, input_ids, position_ids)
        if explained is None:
            raise
        raise explained from err


def lm_forward(
    model: Any,
    input_ids: torch.Tensor,  # [B, L]
    attention_mask: torch.Tensor,  # [B, past + L], 1 = a real token; or [B, 1, L, L] bool
    position_ids: torch.Tensor,  # [B, L]
    cache: Any = None,
    use_cache: bool = False,
    logits_to_keep: int = 0,
) -> tuple[torch.Tensor, Any]:
    """Next-token logits [B, L or logits_to_keep, V] and the key/value cache (None without
    `use_cache`). `cache` is what an earlier call returned; pass it back as it came.

    A 4D boolean `attention_mask` ([B, 1, L, L], True = query may attend to key, no cache)
    says exactly who sees whom, as in packed rows (payoff.models.logprobs); transformers gets
    it as the equivalent additive mask."""
    if not lean_supported(model):
        if attention_mask.dim() == 4:
            additive = torch.zeros(
                attention_mask.shape, dtype=model.dtype, device=attention_mask.device
            )
            attention_mask = additive.masked_fill(~attention_mask, torch.finfo(model.dtype).min)
        if cache is not None:
            use_cache = True
        with explained_lookups(model, input_ids, position_ids):
            out = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=use_cache,
                logits_to_keep=logits_to_keep,
                **({} if cache is None else cache_kwargs(model, cache)),
            )
        return out.logits, output_cache(out) if use_cache else None
    body = model.model
    layers = body.layers[: model.config.num_hidden_layers]
    if cache is None and use_cache:
        cache = KVCache(len(layers))
    past = cache.length() if cache is not None else 0
    queries = input_ids.shape[1]
    if attention_mask.dim() == 4:
        mask, is_causal = attention_mask, False
    else:
        mask, is_causal = _attention_mask(attention_mask, queries, past)
    hidden = body.embed_tokens(input_ids)
    cos, sin = body.rotary_emb(hidden, position_ids=position_ids)
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, L, head_dim]: broadcast over heads
    for index, layer in enumerate(layers):
        attention = layer.self_attn
        x = layer.input_layernorm(hidden)
        shape = (*x.shape[:-1], -1, attention.head_dim)
        q = attention.q_proj(x).view(shape).transpose(1, 2)  # [B, heads, L, head_dim]
        k = attention.k_proj(x).view(shape).transpose(1, 2)
        v = attention.v_proj(x).view(shape).transpose(1, 2)
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        if cache is not None:
            k, v = cache.update(index, k, v)
        out = _attend(attention, q, k, v, mask, is_causal)  # [B, heads, L, head_dim]
        out = out.transpose(1, 2).contiguous().reshape(*x.shape[:-1], -1).contiguous()
        hidden = hidden + attention.o_proj(out)
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    hidden = body.norm(hidden)
    if logits_to_keep:
        hidden = hidden[:, -logits_to_keep:]
    return model.lm_head(hidden), cache


def _attend(
    attention: Any,
    q: torch.Tensor,  # [B, heads, L, head_dim]
    k: torch.Tensor,  # [B, kv_heads, K, head_dim]
    v: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
) -> torch.Tensor:
    """SDPA over one layer's heads, [B, heads, L, head_dim]. With grouped-query attention
    (kv_heads < heads) each key/value head serves `groups` query heads, shared as
    transformers' sdpa_attention_forward shares it on CPU and CUDA, so the result is the
    same to the bit there (MPS and XPU, where transformers always passes enable_gqa, agree
    to rounding): SDPA's own enable_gqa without a mask; one query per row (a decode step) folds the
    group's query heads into query positions of their key/value head; otherwise the keys
    and values are repeated per query head."""
    groups = getattr(attention, "num_key_value_groups", 1)
    queries = q.shape[2]
    options: dict[str, Any] = {}
    if groups > 1:
        if mask is None and k.shape[-1] <= 256:
            options["enable_gqa"] = True
        elif queries == 1:
            q = q.reshape(q.shape[0], q.shape[1] // groups, groups, q.shape[-1])
        else:
            k, v = _repeat_heads(k, groups), _repeat_heads(v, groups)
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=0.0,
        scale=attention.scaling,
        is_causal=is_causal,
        **options,
    )
    return out.reshape(out.shape[0], -1, queries, v.shape[-1])  # unfolds a decode step's heads


def _repeat_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, kv_heads, S, D] -> [B, kv_heads * groups, S, D], each head `groups` times in a row
    (transformers' repeat_kv)."""
    batch, heads, length, dim = x.shape
    return x[:, :, None].expand(batch, heads, groups, length, dim).reshape(batch, -1, length, dim)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Llama's rotation of the two halves of the head dimension (transformers' rotate_half)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
