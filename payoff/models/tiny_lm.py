"""payoff's built-in tiny language model: a ~1M-parameter Llama, created locally, no downloads.

It is a plain `transformers.LlamaForCausalLM`, so everything that works on a Hugging Face
model works on it (from_pretrained/save_pretrained, generate, peft), and everything payoff
does to it works on a real model loaded from disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from payoff.core.config import MAX_DEPTH, MAX_TOKENS, MAX_WIDTH, in_range


@dataclass
class TinyLMConfig:
    """Shape of the built-in tiny Llama.

    hidden_size / layers / heads / intermediate_size: the defaults give ~1.05M parameters with
        the 100-symbol character vocabulary; they learn 2-digit addition.
    max_length: longest prompt + completion, in characters (position embeddings are rotary,
        so this only bounds what the config advertises).
    """

    hidden_size: int = field(default=128, metadata=in_range(0, low_open=True, most=MAX_WIDTH))
    layers: int = field(default=4, metadata=in_range(0, low_open=True, most=MAX_DEPTH))
    heads: int = field(default=4, metadata=in_range(0, low_open=True, most=MAX_DEPTH))
    intermediate_size: int = field(default=512, metadata=in_range(0, low_open=True, most=MAX_WIDTH))
    max_length: int = field(default=256, metadata=in_range(0, low_open=True, most=MAX_TOKENS))


def create_tiny_lm(config: TinyLMConfig, tokenizer, seed: int = 0):  # -> LlamaForCausalLM
    """A freshly initialised tiny Llama sized for `tokenizer`'s vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=config.max_length,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    # Initialise from a private generator so creating a model does not shift the global stream.
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(model_config)
    finally:
        torch.set_rng_state(state)
    return model
