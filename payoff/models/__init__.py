"""Networks: MLP actors (categorical, diagonal Gaussian), critics and Q-networks.

The language-model stack lives beside them, one module each: `lm` (loading, LoRA, the
frozen reference, saving), `base_model` (which model a run starts from, cached base
models, `start_lm`), `logprobs` (token log-probabilities, shared prompts, packing) and
`lm_optim` (AdamW and the learning-rate schedule).
"""

from payoff.models.mlp import (
    Actor,
    CategoricalActor,
    Critic,
    GaussianActor,
    ObsNormalizer,
    QNetwork,
    load_policy,
    make_actor,
    save_policy,
)

__all__ = [
    "Actor",
    "CategoricalActor",
    "Critic",
    "GaussianActor",
    "ObsNormalizer",
    "QNetwork",
    "load_policy",
    "make_actor",
    "save_policy",
]
