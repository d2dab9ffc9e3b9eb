"""Networks: MLP actors (categorical, diagonal Gaussian), critics and Q-networks."""

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
