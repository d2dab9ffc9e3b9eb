"""Language models from a local folder (any Hugging Face causal LM) or payoff's tiny built-in one.

`load_lm(config)` returns `(model, tokenizer)`; `save_lm` writes the Hugging Face format
(config.json, model.safetensors, tokenizer.json) so plain
`AutoModelForCausalLM.from_pretrained(folder)` loads what payoff trained. Nothing here
touches the network: a path must be a folder on disk.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payoff.core.errors import ConfigError
from payoff.models.tiny_lm import TinyLMConfig, create_tiny_lm


@dataclass
class ModelConfig:
    """Which language model to train.

    path: a local folder with a Hugging Face causal LM and its tokenizer (config.json,
        *.safetensors, tokenizer.json). Empty: payoff's built-in tiny Llama, freshly
        initialised (`tiny` sets its shape) -- or, for RL algorithms, the base model their
        `base_recipe` builds.
    tiny: shape of the built-in model (ignored when `path` is set).
    dtype: 'float32' (CPU default), 'bfloat16' or 'float16' (GPU).
    lora_rank: 0 trains every weight; > 0 trains LoRA adapters of this rank instead (peft),
        which is what fits a multi-billion-parameter model in memory. Saved models are merged.
    lora_alpha / lora_dropout / lora_targets: the usual peft LoRA settings; lora_targets are
        module names (default: attention and MLP projections of Llama-style models).
    """

    path: str = ""
    tiny: TinyLMConfig = field(default_factory=TinyLMConfig)
    dtype: str = "float32"
    lora_rank: int = 0
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )

    def validate(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(
                f"config key 'model.dtype' must be float32, bfloat16 or float16, got {self.dtype!r}"
            )
        if self.lora_rank < 0:
            raise ConfigError(f"config key 'model.lora_rank' must be >= 0, got {self.lora_rank}")


def quiet_transformers() -> None:
    """No per-shard progress bars or info chatter from transformers inside payoff's own output."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_tokenizer(path: str | Path):
    """A tokenizer from a local folder, with a pad token and left padding for generation."""
    from transformers import AutoTokenizer

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"model path {str(path)!r} is not a folder on disk")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as err:  # transformers raises many types; the user needs one line
        raise ConfigError(
            f"cannot load a tokenizer from {str(folder)!r}: {type(err).__name__}: {str(err).splitlines()[0]} "
            f"(the folder needs tokenizer.json or the model's own tokenizer files)"
        ) from None
    if tokenizer.pad_token is None:
        # Causal LMs often ship without one; padding positions are masked out anyway.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_lm(config: ModelConfig, seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer) for `config`: from `config.path`, or a fresh tiny Llama."""
    from transformers import AutoModelForCausalLM

    from payoff.models.tokenizer import build_char_tokenizer

    quiet_transformers()
    if config.path:
        tokenizer = load_tokenizer(config.path)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(Path(config.path).expanduser()),
                dtype=_torch_dtype(config.dtype),
                local_files_only=True,
            )
        except Exception as err:
            raise ConfigError(
                f"cannot load a causal LM from {config.path!r}: {type(err).__name__}: {str(err).splitlines()[0]}"
            ) from None
    else:
        tokenizer = build_char_tokenizer()
        model = create_tiny_lm(config.tiny, tokenizer, seed=seed).to(_torch_dtype(config.dtype))
    if config.lora_rank > 0:
        model = add_lora(model, config)
    return model, tokenizer


def add_lora(model, config: ModelConfig):
    """Wrap `model` with peft LoRA adapters; only the adapters train."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError(
            "model.lora_rank > 0 needs peft: pip install 'payoff[llm]' (or pip install peft)"
        ) from None
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in config.lora_targets if t in names]
    if not targets:
        raise ConfigError(
            f"none of model.lora_targets {config.lora_targets} name a module of this model; "
            f"some of its module names: {sorted(names)[:20]}"
        )
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def is_lora(model: Any) -> bool:
    """True for a peft model with adapters (what `load_lm` returns when lora_rank > 0)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


class FrozenReference:
    """The frozen reference policy of a KL term: the model as training starts.

    Full fine-tuning keeps a frozen copy of the model. With LoRA only the adapters train,
    and peft starts them at zero, so the model with its adapters switched off *is* the
    starting policy: no second copy of the weights (TRL does the same), which halves the
    weight memory of a LoRA run with a KL penalty.

        with reference.model() as ref:
            ref_logprobs = batched_completion_logprobs(ref, ...)
    """

    def __init__(self, model: Any):
        self.shares_weights = is_lora(model)
        self._model = (
            model if self.shares_weights else copy.deepcopy(model).eval().requires_grad_(False)
        )

    @contextlib.contextmanager
    def model(self) -> Iterator[Any]:
        """The reference as a model, inside this block only (adapters off, eval mode)."""
        if not self.shares_weights:
            yield self._model
            return
        was_training = self._model.training
        self._model.eval()
        try:
            with self._model.disable_adapter():
                yield self._model
        finally:
            self._model.train(was_training)

    def state_dict(self) -> dict[str, Any] | None:
        """The copy's weights (None when shared: the policy's state holds them)."""
        if self.shares_weights:
            return None
        return {k: v.clone() for k, v in self._model.state_dict().items()}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None and not self.shares_weights:
            self._model.load_state_dict(state)


def save_lm(model, tokenizer, path: str | Path) -> Path:
    """Save in Hugging Face format (safetensors); LoRA adapters are merged into a copy first."""
    quiet_transformers()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(str(path), safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    return path


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
