"""Networks: MLP actors (categorical, diagonal Gaussian), critics and Q-networks (`mlp`), what
they see of an observation (`encoding`), and policy files holding an actor on its own
(`policy_file`).

The language-model stack lives beside them, one module each: `lm` (loading, saving),
`lora` (LoRA adapters and the frozen reference), `base_model` (which model a run starts
from, cached base models, `start_lm`), `logprobs` (token log-probabilities, shared prompts,
packing) and `lm_optim` (AdamW, the learning-rate schedule and the optimizer step every
trainer takes).
"""

from payoff.models.encoding import ObsNormalizer
from payoff.models.mlp import (
    Actor,
    CategoricalActor,
    Critic,
    GaussianActor,
    QNetwork,
    make_actor,
)
from payoff.models.policy_file import load_policy, save_policy

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
