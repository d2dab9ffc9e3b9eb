"""PPO's actor-critic in the native kernels: the rollout's sampling and critic pass, and each
minibatch step (forward, clipped surrogate, entropy and value losses, their gradients, the
joint gradient-norm clip and Adam) as one call each.

The reference is PPO's torch path (payoff/algos/ppo.py: autograd and FlatAdam); this is the
same arithmetic summed in another order, so results agree to float32 rounding, not bit for
bit (tests/test_accel.py). It applies to a CPU CategoricalActor and Critic with the same
hidden sizes, tanh or ReLU, flattened actor-then-critic into FlatParameters with a FlatAdam,
and no value clipping.

Layout: the actor and the critic run side by side. Each layer's two weight matrices are one
stacked [2, in, out] block (weights transposed, the layout the products read fastest), the
critic's head padded to the actor's width with columns that get zero gradients, all in one
flat float32 buffer with the gradients and Adam's moments in three more. The torch modules
stay the source of truth between updates: `pull()` copies their weights and FlatAdam's
moments in (one gather), `push()` writes them back (one scatter), so checkpoints, saved
policies, evaluation and the rollout see the ordinary modules.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from payoff.accel.native import MAX_LAYERS, kernels, kernels_for, native_status
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import CategoricalActor, Critic, gumbel_noise

_F32 = np.float32


def _linears(network: nn.Module) -> list[nn.Linear]:
    return [layer for layer in network if isinstance(layer, nn.Linear)]


def plain_mlp(network: nn.Module) -> bool:
    """Whether `network` is an MLP of Linear, ReLU and Tanh layers only: what the kernels run."""
    return bool(getattr(network, "plain", False))


def why_not(actor: Any, critic: Any, flat: Any, optimizer: Any) -> str | None:
    """Why the kernels cannot run PPO's step for these networks and optimizer (None: they can)."""
    if kernels() is None:
        return native_status()
    if not isinstance(actor, CategoricalActor):
        return "the actor is not categorical (the kernels take Discrete actions)"
    if not isinstance(critic, Critic) or actor.device.type != "cpu":
        return "the networks are not a CPU actor and critic"
    if not (plain_mlp(actor.logits) and plain_mlp(critic.value)):
        return "the networks have layers other than Linear, ReLU and Tanh"
    if actor.activation not in ("tanh", "relu") or critic.activation != actor.activation:
        return f"activation {actor.activation!r}: the kernels take tanh or relu, the same for both"
    if critic.hidden != actor.hidden or not actor.hidden:
        return "actor and critic have different hidden sizes"
    if len(actor.hidden) + 1 > MAX_LAYERS:
        return f"the networks have {len(actor.hidden) + 1} layers; the kernels take {MAX_LAYERS}"
    if critic.encoder.normalizer is not actor.encoder.normalizer:
        return "actor and critic do not share one observation normalizer"
    expected = [*actor.parameters(), *critic.parameters()]
    if not (
        isinstance(flat, FlatParameters)
        and isinstance(optimizer, FlatAdam)
        and optimizer.flat is flat
        and len(expected) == len(flat.params)
        and all(p is q for p, q in zip(expected, flat.params, strict=True))
    ):
        return "the optimizer is not a FlatAdam over actor then critic"
    return None


class NativeActorCritic:
    """A CategoricalActor and Critic with FlatParameters/FlatAdam over actor then critic
    parameters, as PPO builds them, stepped by the kernels' `ppo_step`."""

    def __init__(
        self, actor: CategoricalActor, critic: Critic, flat: FlatParameters, optimizer: FlatAdam
    ):
        reason = why_not(actor, critic, flat, optimizer)
        if reason is not None:
            raise ValueError(f"the native PPO step cannot run here: {reason}")
        self.actor, self.critic, self.flat, self.optimizer = actor, critic, flat, optimizer
        actor_linears, critic_linears = _linears(actor.logits), _linears(critic.value)
        # Stacked shapes: per layer W^T [2, in, out] and bias [2, 1, out].
        shapes: list[tuple[int, ...]] = []
        for layer in actor_linears:
            shapes += [(2, layer.in_features, layer.out_features), (2, 1, layer.out_features)]
        sizes = [int(np.prod(s)) for s in shapes]
        total = sum(sizes)
        self.params = np.zeros(total, _F32)
        self.grads = np.zeros(total, _F32)
        self.exp_avg = np.zeros(total, _F32)
        self.exp_avg_sq = np.zeros(total, _F32)
        # Where each element of the torch flat buffer (actor's W, b, ..., critic's W, b, ...)
        # sits in the stacked buffer: torch W [out, in] is the stacked W^T's transpose; the
        # critic's head [1, in] is column 0 of its padded [in, A].
        positions, offset = [], 0
        every = np.arange(total)
        for shape, size in zip(shapes, sizes, strict=True):
            positions.append(every[offset : offset + size].reshape(shape))
            offset += size
        index: list[np.ndarray] = []
        for side, linears in ((0, actor_linears), (1, critic_linears)):
            for k, layer in enumerate(linears):
                out_features = layer.out_features
                index.append(positions[2 * k][side][:, :out_features].T.reshape(-1))
                index.append(positions[2 * k + 1][side][0, :out_features].reshape(-1))
        self.index = np.concatenate(index)
        if len(self.index) != flat.leaf.numel():
            raise ValueError("NativeActorCritic: the flat buffer does not match the networks")
        self.torch_params = flat.leaf.data.numpy()
        self.torch_exp_avg = optimizer.exp_avg.numpy()
        self.torch_exp_avg_sq = optimizer.exp_avg_sq.numpy()
        self.dims = np.array(
            [actor_linears[0].in_features, *(layer.out_features for layer in actor_linears)],
            np.int64,
        )
        self.activation_code = 1 if actor.activation == "tanh" else 2
        self._coefs = np.zeros(10)
        self._stats = np.zeros(5)

    # ---- to and from the torch modules ------------------------------------------------
    def pull(self) -> None:
        """Copy the modules' weights and the optimizer's moments in."""
        self.params[self.index] = self.torch_params
        self.exp_avg[self.index] = self.torch_exp_avg
        self.exp_avg_sq[self.index] = self.torch_exp_avg_sq

    def push(self) -> None:
        """Write the weights and moments back into the modules and FlatAdam."""
        self.torch_params[:] = self.params[self.index]
        self.torch_exp_avg[:] = self.exp_avg[self.index]
        self.torch_exp_avg_sq[:] = self.exp_avg_sq[self.index]

    def encode(self, obs: torch.Tensor) -> np.ndarray:
        """The networks' input for a batch of observations (one-hot, normalized): [B, in]."""
        with torch.inference_mode():
            return np.ascontiguousarray(self.actor.encoder.forward(obs).numpy(), dtype=_F32)

    # ---- PPO's epochs ---------------------------------------------------------------------
    def update(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        settings: Any,
        clip: float,
        normalize_per_minibatch: bool,
    ) -> np.ndarray:
        """PPO.update's epochs and minibatches, each step one kernel call: the same shuffles
        (torch.randperm), minibatches, per-minibatch normalization and early stop on
        target_kl. Returns the mean [policy loss, value loss, entropy, approx_kl, clip
        fraction] over the steps taken. `settings` is the PPOConfig."""
        self.pull()
        fields = (
            self.encode(obs),
            actions.numpy(),
            old_logprobs.numpy(),
            advantages.numpy(),
            returns.numpy(),
        )
        batch = len(fields[1])
        size = min(settings.minibatch_size, batch)
        stats = []
        for _ in range(settings.epochs):
            if batch <= size:  # the mean gradient ignores order: no shuffle
                x, acts, old, adv, ret = fields
            else:
                order = torch.randperm(batch).numpy()
                x, acts, old, adv, ret = (f[order] for f in fields)
            if normalize_per_minibatch:
                adv = _normalize_blocks(adv, size)
            for start in range(0, batch, size):
                end = start + size
                stats.append(
                    self.step(
                        x[start:end],
                        acts[start:end],
                        old[start:end],
                        adv[start:end],
                        ret[start:end],
                        clip,
                        settings.ent_coef,
                        settings.vf_coef,
                        settings.max_grad_norm,
                        self.optimizer.lr,
                    )
                )
            approx_kl = stats[-1][3]  # of the epoch's last minibatch, as in CleanRL
            if settings.target_kl is not None and float(approx_kl) > settings.target_kl:
                break
        self.push()
        return sum(stats) / len(stats)

    def step(
        self,
        x: np.ndarray,
        actions: np.ndarray,
        old_logprobs: np.ndarray,
        advantages: np.ndarray,
        returns: np.ndarray,
        clip: float,
        ent_coef: float,
        vf_coef: float,
        max_grad_norm: float,
        lr: float,
    ) -> np.ndarray:
        """One PPO gradient step on a minibatch, Adam included; returns [policy loss, value
        loss, entropy, approx_kl, clip fraction] as payoff.algos.shared.policy_loss computes
        them. x [B, in] encoded observations; actions [B] action indices; advantages already
        normalized if they should be. The loss is clipped_surrogate + vf_coef * 0.5 *
        mean((V - R)^2) - ent_coef * mean entropy (PPO's, clip_value off)."""
        optimizer = self.optimizer
        beta1, beta2 = optimizer.betas
        steps = optimizer.steps + 1  # counted once the step is taken (the kernel checks first)
        coefs = self._coefs
        coefs[:9] = (
            clip,
            ent_coef,
            vf_coef,
            max_grad_norm,
            lr / (1 - beta1**steps),
            1 / (1 - beta2**steps) ** 0.5,
            beta1,
            beta2,
            optimizer.eps,
        )
        kernels().ppo_step(
            self.dims,
            self.activation_code,
            self.params,
            self.grads,
            self.exp_avg,
            self.exp_avg_sq,
            _contiguous(x, _F32),
            _contiguous(actions, np.int64),
            _contiguous(old_logprobs, _F32),
            _contiguous(advantages, _F32),
            _contiguous(returns, _F32),
            coefs,
            self._stats,
        )
        optimizer.steps = steps
        return self._stats.copy()


class NativeRolloutSampler:
    """`payoff.models.mlp.RolloutSampler` in the kernels: the same Gumbel noise (drawn ahead
    from torch's generator), layers, argmax and log-probs, one call a step. Logits agree with
    torch's to float32 rounding, so an action can differ only where two perturbed logits tie
    to within it. Box observations (flattened, through the actor's normalizer when enabled);
    weights are read when the sampler is made: make one per rollout.

    Given the critic, `values` runs it over the rollout's observations in one call too.
    """

    @staticmethod
    def supports(actor: Any) -> bool:
        return (
            isinstance(actor, CategoricalActor)
            and actor.device.type == "cpu"
            and not actor.encoder.discrete
            and plain_mlp(actor.logits)
            and actor.activation in ("tanh", "relu")
            and kernels_for(len(actor.hidden) + 1) is not None
        )

    def __init__(
        self, actor: CategoricalActor, num_steps: int, num_envs: int, critic: Critic | None = None
    ):
        actions = int(actor.action_space.n)  # type: ignore[attr-defined]
        self.step = 0
        self.noise = gumbel_noise(num_steps, num_envs, actions).numpy()  # [T, N, A]
        self.logits = np.empty((num_steps, num_envs, actions), _F32)
        self.actions = torch.empty(num_steps, num_envs, dtype=torch.long)
        self.actions_np = self.actions.numpy()
        self.activation_code = 1 if actor.activation == "tanh" else 2
        # Each layer as (W^T [in, out] contiguous, bias [out]), float32 copies the kernels read
        # by address: they must live as long as the sampler.
        self.layers = _layers(actor.logits)
        self._actor_net = _net(self.layers)
        self.critic: Critic | None = None
        if (
            critic is not None
            and critic.encoder.normalizer is actor.encoder.normalizer
            and critic.activation == actor.activation
            and plain_mlp(critic.value)
            and kernels_for(len(critic.hidden) + 1) is not None
        ):
            self.critic = critic
            self.value_layers = _layers(critic.value)
            self._value_net = _net(self.value_layers)
        normalizer = actor.normalizer
        if normalizer.enabled:  # as ObsNormalizer.forward, in float32: mean, std, (unused)
            mean = normalizer.mean.to(torch.float32).numpy()
            std = torch.sqrt(normalizer.var.to(torch.float32) + 1e-8).numpy()
            self._normalize = np.stack([mean, std, np.zeros_like(mean)]).astype(_F32)
            self._clip = float(normalizer.clip)
        else:
            self._normalize = np.zeros(0, _F32)
            self._clip = 0.0

    def native_actor(self) -> tuple[Any, ...]:
        """The actor as the kernels' fused rollouts take it (sizes, layer addresses,
        activation, normalization, clip)."""
        return (*self._actor_net, self.activation_code, self._normalize, self._clip)

    def act(self, obs: np.ndarray, start: int = 0) -> np.ndarray:
        """The env actions (each action's index plus the Discrete space's `start`) for
        observations [N, ...]; `actions` keeps the indices."""
        t = self.step
        if len(obs) != self.actions_np.shape[1]:
            raise ValueError(
                f"the sampler was made for {self.actions_np.shape[1]} envs, got {len(obs)} rows"
            )
        kernels().act(
            *self._actor_net,
            self.activation_code,
            _contiguous(obs.reshape(len(obs), -1), _F32),
            self._normalize,
            self._clip,
            self.noise[t],
            self.logits[t],
            self.actions_np[t],
        )
        self.step = t + 1
        actions = self.actions_np[t]
        return actions + start if start else actions

    @property
    def value_fn(self) -> Any:
        """`values`, or None when the sampler was made without a critic it can run."""
        return self.values if self.critic is not None else None

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's V(s) for observations [B, ...]: [B]."""
        assert self.critic is not None, "made without a critic: see value_fn"
        x = self.critic.encoder.forward(obs).numpy()
        out = np.empty((len(x), 1), _F32)
        kernels().forward(*self._value_net, self.activation_code, _contiguous(x, _F32), out)
        return torch.from_numpy(out[:, 0])

    def logprobs(self) -> torch.Tensor:
        """log pi(a_t | s_t) of the actions sampled so far: [steps taken, N]."""
        taken = self.step
        logprobs = torch.log_softmax(torch.from_numpy(self.logits[:taken]), dim=-1)
        return logprobs.gather(-1, self.actions[:taken, :, None])[..., 0]


def _layers(network: nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each Linear of `network` as (W^T [in, out] contiguous, bias [out]), float32 copies."""
    return [
        (
            np.ascontiguousarray(layer.weight.detach().numpy().T, dtype=_F32),
            layer.bias.detach().numpy().astype(_F32),
        )
        for layer in _linears(network)
    ]


def _net(layers: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """A network as the kernels take it: its sizes [in, h1, ..., out] and the addresses of
    each layer's W^T and bias (the arrays in `layers`, which must outlive it)."""
    dims = np.array([layers[0][0].shape[0], *(w.shape[1] for w, _ in layers)], np.int64)
    addresses = []
    for weight_t, bias in layers:
        addresses += [weight_t.ctypes.data, bias.ctypes.data]
    return dims, np.array(addresses, np.int64)


def _normalize_blocks(values: np.ndarray, size: int) -> np.ndarray:
    """`normalize` (zero mean, unit unbiased std) applied to each consecutive block of
    `size` (the minibatches of one epoch) at once; a last block of one value stays as is."""
    out = np.empty_like(values)
    full = len(values) // size * size
    blocks = [values[:full].reshape(-1, size), values[full:][None]]
    outs = [out[:full].reshape(-1, size), out[full:][None]]
    for block, block_out in zip(blocks, outs, strict=True):
        count = block.shape[1]
        if count == 1:
            block_out[:] = block
        elif count > 1 and len(block):
            centred = block - np.add.reduce(block, axis=1, keepdims=True) / np.float32(count)
            variance = np.add.reduce(np.square(centred), axis=1, keepdims=True) / np.float32(
                count - 1
            )
            np.divide(centred, np.sqrt(variance) + np.float32(1e-8), out=block_out)
    return out


def _contiguous(array: np.ndarray, dtype: type) -> np.ndarray:
    """`array` as a C-contiguous array of `dtype`, copied only where it is not one already."""
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=dtype)
