"""LoRA adapters on a language model, and the frozen reference policy they make free.

`add_lora` wraps a model with peft's adapters (only they train); `FrozenReference` is the
model as training starts, for a KL term: with LoRA, the model with its adapters off, no
second copy. `payoff.models.lm.load_lm` adds the adapters when model.lora_rank > 0.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from payoff.core.errors import ConfigError
from payoff.core.state import cpu_state
from payoff.models.transformers_compat import quiet_peft_wrap

if TYPE_CHECKING:
    from payoff.models.lm import ModelConfig


def add_lora(model, config: ModelConfig):
    """Wrap `model` with peft LoRA adapters; only the adapters train."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError(
            "model.lora_rank > 0 needs peft: pip install 'payoff[llm]' (or pip install peft)"
        ) from None
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets: Any = (
        "all-linear"  # peft's shorthand
        if config.lora_targets == ["all-linear"]
        else [t for t in config.lora_targets if t in names]
    )
    missing = [t for t in config.lora_targets if t != "all-linear" and t not in names]
    if missing or not targets:  # a misspelt one used to be dropped without a word
        raise ConfigError(
            f"model.lora_targets {missing or config.lora_targets} name no module of this "
            f"model; some of its module names: {sorted(names)[:20]}"
        )
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    if tied and output is not None and targets != "all-linear":
        embeddings = model.get_input_embeddings()
        shared = [n for n, m in model.named_modules() if m is output or m is embeddings]
        named = [t for t in targets if any(n.rsplit(".", 1)[-1] == t for n in shared)]
        if named:  # merging would write the head's update into the input embeddings too
            raise ConfigError(
                f"model.lora_targets {named}: this model ties its output head to its input "
                f"embeddings (tie_word_embeddings), so an adapter on one, merged into the "
                f"saved model, changes both and the saved model is not the one trained; "
                f"leave {named} out of lora_targets"
            )
    # GPT-2's projections are transformers' Conv1D, whose weight is stored [in, out]: peft
    # flips fan_in_fan_out itself for them, with a UserWarning; say so up front instead
    conv1d = any(type(m).__name__ == "Conv1D" for m in model.modules())
    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
        fan_in_fan_out=conv1d,
    )
    try:
        return quiet_peft_wrap(get_peft_model, model, lora)
    except ValueError as err:
        if "is not supported" not in str(err):
            raise
        linear = sorted(
            {
                n.rsplit(".", 1)[-1]
                for n, m in model.named_modules()
                # nn.Linear, and transformers' Conv1D (GPT-2's linear layers)
                if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"
            }
        )
        raise ConfigError(
            f"model.lora_targets {config.lora_targets}: {str(err).splitlines()[0]} LoRA adapts "
            f"linear layers; this model's are named {linear[:12]}"
        ) from None


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
        """The copy's weights on the CPU (None when shared: the policy's state holds them)."""
        if self.shares_weights:
            return None
        return cpu_state(self._model)

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None and not self.shares_weights:
            self._model.load_state_dict(state)
