"""The few transformers calls whose names changed inside the `llm` extra's range (>=4.56,<5.40).

transformers 5.24 renamed the key/value cache argument and output field `past_key_values`
to `cache`, and `gradient_checkpointing_enable` / `is_gradient_checkpointing` to
`activation_checkpointing_enable` / `is_activation_checkpointing`; the old names warn
(FutureWarning) and go away in 5.40 or 6. Each helper here uses the new name when the
installed transformers has it and the old one otherwise, so a run prints no deprecation
warning on either side of the rename.

    model(**inputs, **cache_kwargs(model, cache))   # feed a key/value cache back in
    output_cache(out)                                # the cache a forward pass returned
    enable_checkpointing(model)                      # recompute activations in backward
    is_checkpointing(model)                          # ... is it on (and does it apply now)?
    quiet_peft_wrap(fn, ...)                          # peft's own call of the old property
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any


def base_causal_lm(model: Any) -> Any:
    """The transformers model under a peft wrapper (the model itself when there is none)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


@cache
def _forward_takes_cache(model_class: type) -> bool:
    # deprecate_kwarg wraps forward with functools.wraps, so the signature is the new one.
    return "cache" in inspect.signature(model_class.forward).parameters


def cache_argument(model: Any) -> str:
    """'cache' (transformers >= 5.24) or 'past_key_values': the forward argument of a KV cache."""
    return "cache" if _forward_takes_cache(type(base_causal_lm(model))) else "past_key_values"


def cache_kwargs(model: Any, kv_cache: Any) -> dict[str, Any]:
    """{argument name: kv_cache} for `model`'s forward."""
    return {cache_argument(model): kv_cache}


def output_cache(output: Any) -> Any:
    """The key/value cache in a forward pass's output, under its new name or its old one."""
    # ModelOutput is a dict: reading the key avoids the deprecated attribute's warning.
    return output["cache"] if "cache" in output else output["past_key_values"]


def enable_checkpointing(model: Any) -> None:
    """Activation (gradient) checkpointing on every decoder layer, non-reentrant.

    Non-reentrant checkpointing needs no input that requires grad, so it works under LoRA
    (frozen embeddings) too. Active only in training mode; generation (eval mode) keeps
    its cache.
    """
    target = base_causal_lm(model)
    kwargs = {"use_reentrant": False}
    if hasattr(target, "activation_checkpointing_enable"):
        target.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # transformers < 5.24
        target.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    # A training forward pass never needs the cache; saying so up front spares transformers'
    # "use_cache=True is incompatible with gradient checkpointing" notice.
    target.config.use_cache = False


def is_checkpointing(model: Any) -> bool:
    """True when `model` recomputes activations in this mode (checkpointing on, training)."""
    if not model.training:
        return False
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def quiet_peft_wrap(wrap: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call peft's `wrap(*args, **kwargs)` (get_peft_model, PeftModel.from_pretrained) without
    the FutureWarning of peft reading transformers' deprecated `is_gradient_checkpointing`.

    That read is inside peft (peft_model.py), not payoff; only that one message is hidden.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        return wrap(*args, **kwargs)
