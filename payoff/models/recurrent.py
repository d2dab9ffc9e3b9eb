"""GRU actor and critic for recurrent PPO and RL²: networks with memory across steps.

Both read a sequence of observations through a GRU (Cho et al. 2014) and a small MLP head
on its output; the hidden state h carries what the observations so far said (the velocity
of a cart whose observation shows only its position; which bandit arm paid).

Shapes, time first as in payoff's rollouts:

    obs     [T, B, *obs_shape]
    starts  [T, B]  bool: an episode starts at this step, so h is reset to zeros before it
    h0      [B, H]  the hidden state before the first step (as it was before any reset)
    ->      outputs [T, B, ...] and h after the last step [B, H]

`sequence` runs the GRU over whole stretches between resets (one fused call per stretch,
not one per step), which gives the same numbers as stepping it one step at a time
(tests/test_recurrent_ppo.py checks this).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from payoff.core.errors import EnvError
from payoff.core.imports import check_weights
from payoff.envs.observations import observation_batch
from payoff.models.encoding import ObsNormalizer
from payoff.models.mlp import Actor, mlp


class _GRUTrunk(nn.Module):
    """Encoded observations -> GRU outputs, with hidden-state resets at episode starts."""

    def __init__(self, in_dim: int, rnn_hidden: int):
        super().__init__()
        self.rnn_hidden = int(rnn_hidden)
        h = self.rnn_hidden
        check_weights(3 * h * (int(in_dim) + h + 2), f"a GRU of {h} units on {in_dim} inputs")
        self.gru = nn.GRU(in_dim, self.rnn_hidden)
        for name, param in self.gru.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    def forward(
        self, x: torch.Tensor, starts: torch.Tensor, h0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, B, in], starts [T, B], h0 [B, H] -> (outputs [T, B, H], h after the last step)."""
        keep = (~starts).to(x.dtype)[..., None]  # [T, B, 1]: 0 where h resets
        # Cut the sequence where any env's episode starts; inside a stretch nn.GRU runs fused.
        cuts = (torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist()
        bounds = [0, *cuts, x.shape[0]]
        h = h0
        outputs = []
        for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
            out, h_last = self.gru(x[begin:end], (h * keep[begin])[None].contiguous())
            outputs.append(out)
            h = h_last[0]
        return torch.cat(outputs), h


def _encode(encoder: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """Apply a per-step observation encoder to obs [T, B, *shape] -> [T, B, features]."""
    steps, batch = obs.shape[:2]
    return encoder(obs.reshape(steps * batch, *obs.shape[2:])).reshape(steps, batch, -1)


class RecurrentActor(Actor):
    """A categorical policy pi(a | o_1..o_t): observation encoder -> GRU -> MLP -> logits.

    hidden: widths of the MLP between the GRU and the logits (may be empty).
    rnn_hidden: the GRU's width (the size of the memory h).
    The stateless `sample`/`mode` of `Actor` do not apply; use `step` with a hidden state.
    """

    kind = "recurrent_categorical"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden: list[int] | tuple[int, ...] = (64,),
        activation: str = "tanh",
        normalize_obs: bool = False,
        rnn_hidden: int = 64,
    ):
        super().__init__(observation_space, action_space, hidden, activation, normalize_obs)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise EnvError(
                f"the recurrent actor takes Discrete action spaces, got {action_space}; "
                f"feed-forward PPO (algo: ppo) takes Box, MultiDiscrete and MultiBinary actions"
            )
        self.rnn_hidden = int(rnn_hidden)
        self.trunk = _GRUTrunk(self.encoder.dim, self.rnn_hidden)
        self.logits = mlp(self.rnn_hidden, self.hidden, int(action_space.n), activation, 0.01)

    def initial_state(self, batch: int) -> torch.Tensor:
        """The hidden state of a fresh episode: zeros [batch, rnn_hidden]."""
        return torch.zeros(batch, self.rnn_hidden, device=self.device)

    def sequence(
        self, obs: torch.Tensor, starts: torch.Tensor, h0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [T, B, A] for a sequence, and the hidden state after it [B, H]."""
        features, h = self.trunk(_encode(self.encoder, obs), starts, h0)
        return self.logits.forward(features), h

    def step(
        self, obs: torch.Tensor, starts: torch.Tensor, h: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for a batch: obs [B, ...], starts [B], h [B, H] -> (logits [B, A], new h)."""
        logits, h = self.sequence(obs[None], starts[None], h)
        return logits[0], h

    def log_prob_entropy_sequence(
        self, obs: torch.Tensor, actions: torch.Tensor, starts: torch.Tensor, h0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a_t | o_1..o_t) and the entropy at each step: ([T, B], [T, B])."""
        logits, _ = self.sequence(obs, starts, h0)
        logprobs = torch.log_softmax(logits, dim=-1)  # [T, B, A]
        entropy = -(logprobs.exp() * logprobs).sum(-1)
        return logprobs.gather(-1, actions.long()[..., None])[..., 0], entropy

    def _needs_state(self, *args: Any) -> Any:
        raise EnvError(
            "a recurrent actor acts on its hidden state as well as the observation: use "
            "step(obs, starts, h) or predict_step(obs, state, episode_start) (RecurrentPPO."
            "predict); it cannot serve as a memoryless policy (e.g. an imitation expert)"
        )

    sample = mode = log_prob_entropy = _needs_state  # the stateless Actor interface

    @staticmethod
    def sample_logits(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions [B] (Gumbel-max, as CategoricalActor) and their log-probs [B]."""
        gumbel = torch.rand_like(logits).clamp_min_(1e-20).log_().neg_().log_().neg_()
        actions = torch.argmax(logits + gumbel, dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, actions[:, None])[:, 0]
        return actions, logprobs

    @torch.no_grad()
    def predict_step(
        self,
        observation: Any,
        state: np.ndarray | None = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[Any, np.ndarray]:
        """Actions for one observation or a batch, carrying the hidden state (NumPy in and
        out, like sb3-contrib's RecurrentPPO.predict). See RecurrentPPO.predict."""
        batch, single = observation_batch(observation, self.observation_space)
        n = batch.shape[0]
        if state is None:
            h = self.initial_state(n)
        else:
            h = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)
            if tuple(h.shape) != (n, self.rnn_hidden):
                raise EnvError(
                    f"predict: state has shape {tuple(h.shape)}, expected ({n}, "
                    f"{self.rnn_hidden}) for {n} observation(s); pass the state predict returned"
                )
        if episode_start is None:
            starts = torch.zeros(n, dtype=torch.bool, device=self.device)
        else:
            flags = np.asarray(episode_start, dtype=bool).reshape(-1)
            if flags.size not in (1, n):
                raise EnvError(
                    f"predict: episode_start has {flags.size} value(s) for {n} observation(s); "
                    f"give one bool, or one per observation"
                )
            starts = torch.as_tensor(np.broadcast_to(flags, (n,)).copy(), device=self.device)
        obs_t = torch.as_tensor(batch, device=self.device)
        logits, h = self.step(obs_t, starts, h)
        actions = torch.argmax(logits, -1) if deterministic else self.sample_logits(logits)[0]
        env_actions = self.to_env(actions)
        new_state = h.cpu().numpy()
        return (int(env_actions[0]) if single else env_actions), new_state

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "rnn_hidden": self.rnn_hidden}


class RecurrentCritic(nn.Module):
    """V(o_1..o_t): its own GRU and MLP; shares the actor's observation normalizer."""

    def __init__(
        self,
        encoder: nn.Module,
        hidden: list[int] | tuple[int, ...] = (64,),
        activation: str = "tanh",
        rnn_hidden: int = 64,
    ):
        """encoder: the actor's observation encoder (`actor.encoder`), so both networks
        read observations through the same normalizer."""
        super().__init__()
        self.encoder = encoder
        self.rnn_hidden = int(rnn_hidden)
        self.trunk = _GRUTrunk(int(encoder.dim), self.rnn_hidden)  # type: ignore[arg-type]
        self.value = mlp(self.rnn_hidden, [int(h) for h in hidden], 1, activation, 1.0)

    @property
    def normalizer(self) -> ObsNormalizer:
        return self.encoder.normalizer  # type: ignore[return-value]

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, self.rnn_hidden, device=next(self.parameters()).device)

    def sequence(
        self, obs: torch.Tensor, starts: torch.Tensor, h0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Values [T, B] for a sequence, and the GRU outputs [T, B, H] (the hidden state
        after each step)."""
        features, _ = self.trunk(_encode(self.encoder, obs), starts, h0)
        return self.value.forward(features)[..., 0], features
