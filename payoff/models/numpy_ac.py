"""PPO's minibatch step for a small categorical actor and its critic, in NumPy.

For the 64-64 networks of classic control, a PPO minibatch of 64 is a few dozen tiny
array operations, and what each costs is the call, not the arithmetic: torch dispatches
one in ~5 us, NumPy in ~1 us. `lunarlander-ppo` takes 1,024 such steps per rollout, and
through torch (gradients by hand, `CategoricalActor.surrogate_backward`) they cost as much
CPU time as stepping the 16 Box2D envs. `NumpyActorCritic` runs the whole step (forward,
the clipped surrogate, entropy and value losses, their gradients, the joint gradient-norm
clip and Adam) as NumPy calls on float32 arrays:

- The actor and the critic have the same hidden sizes, so they run side by side: each
  layer's two weight matrices are one stacked [2, in, out] array, one batched matmul for
  both networks. The critic's head is padded to the actor's width; its extra columns get
  zero gradients, so Adam never moves them from zero.
- Weights are stored transposed ([in, out]), the layout BLAS multiplies fastest from the
  left, in one flat float32 buffer with the gradients and Adam's moments in three more.

The torch modules stay the source of truth between updates: `pull()` copies their weights
and FlatAdam's moments in (one gather), `push()` writes them back (one scatter), so
checkpoints, saved policies, evaluation and the rollout see the ordinary modules. The
arithmetic is autograd's and torch's Adam's, but summed in another order: results agree to
float32 rounding (~1e-6 relative), not bit for bit (tests/test_numpy_ac.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from payoff.core.native import kernels, kernels_for
from payoff.models.flat import FlatAdam, FlatParameters
from payoff.models.mlp import CategoricalActor, Critic, _gumbel

_F32 = np.float32


def _linears(network: nn.Module) -> list[nn.Linear]:
    return [layer for layer in network if isinstance(layer, nn.Linear)]


class NumpyActorCritic:
    """A CategoricalActor and Critic (same hidden sizes and activation, tanh or ReLU) with
    FlatParameters/FlatAdam over actor then critic parameters, as PPO builds them."""

    @staticmethod
    def supports(actor: Any, critic: Any, flat: Any, optimizer: Any) -> bool:
        """Whether these networks and optimizer are ones this class can run."""
        if not (
            isinstance(actor, CategoricalActor)
            and isinstance(critic, Critic)
            and isinstance(flat, FlatParameters)
            and isinstance(optimizer, FlatAdam)
            and optimizer.flat is flat
            and actor.device.type == "cpu"
            and actor.logits.backprop_by_hand
            and critic.value.backprop_by_hand
            and actor.activation in ("tanh", "relu")
            and critic.activation == actor.activation
            and critic.hidden == actor.hidden
            and len(actor.hidden) >= 1
            and critic.encoder.normalizer is actor.encoder.normalizer
        ):
            return False
        expected = [*actor.parameters(), *critic.parameters()]
        return len(expected) == len(flat.params) and all(
            p is q for p, q in zip(expected, flat.params, strict=True)
        )

    def __init__(
        self, actor: CategoricalActor, critic: Critic, flat: FlatParameters, optimizer: FlatAdam
    ):
        if not self.supports(actor, critic, flat, optimizer):
            raise ValueError(
                "NumpyActorCritic needs a CPU CategoricalActor and Critic with the same hidden "
                "sizes and tanh/relu activation, flattened actor-then-critic into FlatParameters "
                "with a FlatAdam"
            )
        self.actor, self.critic, self.flat, self.optimizer = actor, critic, flat, optimizer
        self.tanh = actor.activation == "tanh"
        actor_linears, critic_linears = _linears(actor.logits), _linears(critic.value)
        self.num_actions = actor_linears[-1].out_features
        # Stacked shapes: per layer W^T [2, in, out] and bias [2, 1, out]. The first layer's
        # input is shared, so it is [2, in, out] too (broadcast against x [1, B, in]).
        shapes: list[tuple[int, ...]] = []
        for layer in actor_linears:
            shapes += [(2, layer.in_features, layer.out_features), (2, 1, layer.out_features)]
        sizes = [int(np.prod(s)) for s in shapes]
        total = sum(sizes)
        self.params = np.zeros(total, _F32)
        self.grads = np.zeros(total, _F32)
        self.exp_avg = np.zeros(total, _F32)
        self.exp_avg_sq = np.zeros(total, _F32)
        self.scratch = np.zeros(total, _F32)

        def views(buffer: np.ndarray) -> list[np.ndarray]:
            out, offset = [], 0
            for shape, size in zip(shapes, sizes, strict=True):
                out.append(buffer[offset : offset + size].reshape(shape))
                offset += size
            return out

        self.weights, self.grad_views = views(self.params), views(self.grads)
        # Where each element of the torch flat buffer (actor's W, b, ..., critic's W, b, ...)
        # sits in the stacked buffer: torch W [out, in] is the stacked W^T's transpose; the
        # critic's head [1, in] is column 0 of its padded [in, A].
        positions = views(np.arange(total))
        index: list[np.ndarray] = []
        for side, linears in ((0, actor_linears), (1, critic_linears)):
            for k, layer in enumerate(linears):
                out_features = layer.out_features
                index.append(positions[2 * k][side][:, :out_features].T.reshape(-1))
                index.append(positions[2 * k + 1][side][0, :out_features].reshape(-1))
        self.index = np.concatenate(index)
        if len(self.index) != flat.leaf.numel():
            raise ValueError("NumpyActorCritic: the flat buffer does not match the networks")
        self.torch_params = flat.leaf.data.numpy()
        self.torch_exp_avg = optimizer.exp_avg.numpy()
        self.torch_exp_avg_sq = optimizer.exp_avg_sq.numpy()
        self._grad_out: np.ndarray | None = None  # [2, B, A], reused while B is the same
        self._ones: np.ndarray | None = None  # [1, B]
        self._row_offsets: np.ndarray | None = None  # [B]: row * num_actions
        # The native kernel (payoff/core/_kernels.c) runs the whole step in one call where it
        # was built; None runs it as the NumPy calls below (tests set it to compare them).
        self.use_native = kernels_for(len(actor_linears)) is not None
        self.dims = np.array(
            [actor_linears[0].in_features, *(layer.out_features for layer in actor_linears)],
            np.int64,
        )
        self.activation_code = 1 if self.tanh else 2
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
        encoder = self.actor.encoder
        if not encoder.discrete and not encoder.normalizer.enabled:  # flattened, as float32
            return np.ascontiguousarray(obs.numpy().reshape(len(obs), -1), dtype=_F32)
        with torch.inference_mode():
            return np.ascontiguousarray(self.actor.encoder.forward(obs).numpy(), dtype=_F32)

    # ---- one minibatch ------------------------------------------------------------------
    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Both networks on x [B, in]: their stacked outputs [2, B, A] (actor's logits,
        critic's value in column 0) and each layer's input (what the backward needs)."""
        inputs = [x]
        h: np.ndarray = x[None]  # [1, B, in], broadcast over the two networks
        last = len(self.weights) // 2 - 1
        for k in range(last + 1):
            weight_t, bias = self.weights[2 * k], self.weights[2 * k + 1]
            h = np.matmul(h, weight_t)  # [2, B, out]
            h += bias
            if k < last:
                if self.tanh:
                    np.tanh(h, out=h)
                else:
                    np.maximum(h, 0, out=h)
                inputs.append(h)
        return h, inputs

    def backward(self, inputs: list[np.ndarray], grad_out: np.ndarray) -> None:
        """Gradients of the loss into self.grads, given its gradient [2, B, A] with respect to
        `forward`'s output: per layer dW^T = input^T g, db = sum over rows of g, then
        g W times the activation's derivative read from its output (tanh 1 - out^2, ReLU
        1[out > 0])."""
        g = grad_out
        batch = grad_out.shape[1]
        if self._ones is None or self._ones.shape[1] != batch:
            self._ones = np.ones((1, batch), _F32)
        ones = self._ones
        for k in range(len(inputs) - 1, -1, -1):
            layer_input = inputs[k]
            if k == 0:  # the shared input x [B, in]
                np.matmul(layer_input.T, g, out=self.grad_views[0])
            else:
                np.matmul(layer_input.transpose(0, 2, 1), g, out=self.grad_views[2 * k])
            # db as ones [1, B] @ g: a BLAS product, ~5x faster than a sum over axis 1
            np.matmul(ones, g, out=self.grad_views[2 * k + 1])
            if k == 0:
                break
            g = np.matmul(g, self.weights[2 * k].transpose(0, 2, 1))  # [2, B, in]
            if self.tanh:
                derivative = np.square(layer_input)
                np.subtract(1, derivative, out=derivative)
                g *= derivative
            else:
                g *= layer_input > 0

    def ppo_step(
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
        """One PPO gradient step on a minibatch; returns [policy loss, value loss, entropy,
        approx_kl, clip fraction] as payoff.algos.shared.policy_loss computes them.

        x [B, in] encoded observations; actions [B] int64 action indices; advantages
        already normalized if they should be. The loss is clipped_surrogate + vf_coef * 0.5 *
        mean((V - R)^2) - ent_coef * mean entropy (PPO's, clip_value off).
        """
        if self.use_native:
            return self._native_step(
                x,
                actions,
                old_logprobs,
                advantages,
                returns,
                clip,
                ent_coef,
                vf_coef,
                max_grad_norm,
                lr,
            )
        batch, num_actions = len(x), self.num_actions
        if self._row_offsets is None or len(self._row_offsets) != batch:
            self._row_offsets = np.arange(batch) * num_actions
        # the flat positions of the taken actions in the [B, A] log-probs
        action_index = self._row_offsets + actions
        out, inputs = self.forward(x)
        logits, values = out[0], out[1, :, 0]
        # Reductions call the ufuncs' own reduce: ndarray.sum/.mean/np.clip go through
        # Python wrappers that cost more than the arithmetic on arrays this small.
        add = np.add.reduce
        # log-softmax and its probabilities
        shifted = logits - _last_axis(np.maximum, logits)
        exps = np.exp(shifted)
        sums = _last_axis(np.add, exps)
        logprobs = shifted - np.log(sums)  # [B, A]
        probs = exps / sums
        neg_entropy = _last_axis(np.add, probs * logprobs)[:, 0]  # [B]
        log_ratio = logprobs.take(action_index) - old_logprobs
        ratio = np.exp(log_ratio)
        weighted = advantages * ratio
        clipped_ratio = np.minimum(np.maximum(ratio, _F32(1 - clip)), _F32(1 + clip))
        weighted_clipped = advantages * clipped_ratio
        # clipped_surrogate's max(-A r, -A clip(r)) is -min(A r, A clip(r))
        surrogate = np.minimum(weighted, weighted_clipped)
        error = values - returns

        # d loss / d log pi(a|s) = (d loss / d ratio) * ratio, with d loss / d ratio = -A / B
        # where the min takes the unclipped term (ties: the clip is inactive, same value),
        # 0 where the clip holds the ratio.
        unclipped = weighted <= weighted_clipped
        grad_logprob = np.where(unclipped, weighted, 0) * _F32(-1.0 / batch)
        # d/dlogits: the taken action's log-prob gives g (onehot - p); the entropy bonus
        # -c mean(H) gives (c / B) p (log p + H) = (c / B) p (log p - neg_entropy).
        if self._grad_out is None or self._grad_out.shape[1] != batch:
            self._grad_out = np.zeros((2, batch, num_actions), _F32)
        grad_out = self._grad_out
        grad_logits = grad_out[0]
        if ent_coef:
            np.multiply(
                probs,
                (logprobs - neg_entropy[:, None]) * _F32(ent_coef / batch) - grad_logprob[:, None],
                out=grad_logits,
            )
        else:  # no entropy bonus: the same, without the terms that would be multiplied by 0
            np.multiply(probs, -grad_logprob[:, None], out=grad_logits)
        grad_logits.reshape(-1)[action_index] += grad_logprob
        np.multiply(error, _F32(vf_coef / batch), out=grad_out[1, :, 0])
        self.backward(inputs, grad_out)
        self._adam(max_grad_norm, lr)
        ratio_minus_one = ratio - 1
        return np.array(
            [
                -add(surrogate) / batch,
                0.5 * np.dot(error, error) / batch,
                -add(neg_entropy) / batch,
                add(ratio_minus_one - log_ratio) / batch,
                np.count_nonzero(np.abs(ratio_minus_one) > clip) / batch,
            ]
        )

    def _native_step(
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
        """`ppo_step` as one call of the native kernel: the same arithmetic, Adam included."""
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

    def _adam(self, max_grad_norm: float, lr: float) -> None:
        """Clip the joint gradient norm, then FlatAdam's step (torch.optim.Adam's math)."""
        grads, scratch = self.grads, self.scratch
        if max_grad_norm > 0:
            norm = float(np.sqrt(np.dot(grads, grads)))
            grads *= _F32(min(max_grad_norm / (norm + 1e-6), 1.0))
        optimizer = self.optimizer
        beta1, beta2 = optimizer.betas
        optimizer.steps += 1
        steps = optimizer.steps
        # exp_avg.lerp_(g, 1 - beta1); exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) g^2
        np.subtract(grads, self.exp_avg, out=scratch)
        scratch *= _F32(1 - beta1)
        self.exp_avg += scratch
        np.square(grads, out=scratch)
        scratch *= _F32(1 - beta2)
        self.exp_avg_sq *= _F32(beta2)
        self.exp_avg_sq += scratch
        # param -= lr / bc1 * exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps)
        np.sqrt(self.exp_avg_sq, out=scratch)
        scratch *= _F32(1 / (1 - beta2**steps) ** 0.5)
        scratch += _F32(optimizer.eps)
        np.divide(self.exp_avg, scratch, out=scratch)
        scratch *= _F32(-lr / (1 - beta1**steps))
        self.params += scratch


class NumpyRolloutSampler:
    """`payoff.models.mlp.RolloutSampler` in NumPy: the same Gumbel noise (drawn ahead from
    torch's generator), the same layers, argmax and log-probs after the rollout, with NumPy's
    cheaper calls. Logits agree with torch's to float32 rounding, so an action can differ
    only where two perturbed logits tie to within it. Box observations (flattened, through
    the actor's normalizer when enabled); weights are read when the sampler is made.

    Given the critic (same inputs as the actor), `values` is the critic in NumPy too: the
    runner's one pass over the rollout's observations, ~3x faster than torch's on 2,112
    rows of CartPole (torch's tanh alone is ~8x NumPy's on arrays this size).
    """

    @staticmethod
    def supports(actor: Any) -> bool:
        return (
            isinstance(actor, CategoricalActor)
            and actor.device.type == "cpu"
            and not actor.encoder.discrete
            and actor.logits.backprop_by_hand
            and actor.activation in ("tanh", "relu")
        )

    def __init__(
        self,
        actor: CategoricalActor,
        num_steps: int,
        num_envs: int,
        critic: Critic | None = None,
    ):
        actions = int(actor.action_space.n)  # type: ignore[attr-defined]
        self.step = 0
        self.noise = _gumbel(torch.rand(num_steps, num_envs, actions)).numpy()  # [T, N, A]
        self.logits = np.empty((num_steps, num_envs, actions), _F32)
        self.actions = torch.empty(num_steps, num_envs, dtype=torch.long)
        self.actions_np = self.actions.numpy()
        self.perturbed = np.empty((num_envs, actions), _F32)
        self.tanh = actor.activation == "tanh"
        self.layers = _numpy_layers(actor.logits)
        # Each hidden layer's output buffer for a step's N rows, written in place.
        self.hidden = [np.empty((num_envs, w.shape[1]), _F32) for w, _ in self.layers[:-1]]
        self.value_layers: list[tuple[np.ndarray, np.ndarray]] | None = None
        if (
            critic is not None
            and critic.encoder.normalizer is actor.encoder.normalizer
            and critic.activation == actor.activation
        ):
            self.value_layers = _numpy_layers(critic.value)
        normalizer = actor.normalizer
        self.normalize: tuple[np.ndarray, np.ndarray, float] | None = None
        if normalizer.enabled:  # as ObsNormalizer.forward, in float32
            mean = normalizer.mean.to(torch.float32)
            std = torch.sqrt(normalizer.var.to(torch.float32) + 1e-8)
            self.normalize = (mean.numpy(), std.numpy(), normalizer.clip)
        # The native kernels (payoff/core/_kernels.c), where built, run a step's forward and
        # sampling in one call, and the critic's pass; None: the NumPy calls below.
        self.activation_code = 1 if self.tanh else 2  # as the native kernels name it
        deepest = max(len(self.layers), len(self.value_layers or ()))
        self.use_native = kernels_for(deepest) is not None
        if self.use_native:
            self._native_setup()

    def _native_setup(self) -> None:
        """The layers' sizes and addresses as the kernels read them."""
        self._actor_net = _native_net(self.layers)
        self._value_net = None if self.value_layers is None else _native_net(self.value_layers)
        if self.normalize is None:
            self._normalize = np.zeros(0, _F32)
            self._clip = 0.0
        else:
            mean, std, clip = self.normalize
            self._normalize = np.stack([mean, std, np.zeros_like(mean)]).astype(_F32)
            self._clip = float(clip)

    def _inputs(self, obs: np.ndarray) -> np.ndarray:
        """The networks' input for observations [B, ...]: flattened, float32, normalized."""
        x = obs.reshape(obs.shape[0], -1)
        if x.dtype != _F32:
            x = x.astype(_F32)
        if self.normalize is not None:
            mean, std, clip = self.normalize
            x = np.clip((x - mean) / std, -clip, clip)
        return x

    def native_actor(self) -> tuple[Any, ...] | None:
        """The actor as the native kernels' rollout takes it (sizes, layer addresses,
        activation, normalization, clip), or None without the kernels."""
        if not self.use_native:
            return None
        return (*self._actor_net, self.activation_code, self._normalize, self._clip)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """The actions [N] sampled for the next step's observations [N, ...]."""
        self.act(obs.numpy())
        return self.actions[self.step - 1]

    def act(self, obs: np.ndarray, start: int = 0) -> np.ndarray:
        """`__call__` in NumPy: the env actions (each action's index plus the Discrete
        space's `start`) for observations [N, ...]; `actions` keeps the indices."""
        t = self.step
        if (
            self.use_native
            and obs.dtype == _F32
            and obs.flags.c_contiguous
            and len(obs) == self.actions_np.shape[1]
        ):
            kernels().act(
                *self._actor_net,
                self.activation_code,
                obs,
                self._normalize,
                self._clip,
                self.noise[t],
                self.logits[t],
                self.actions_np[t],
            )
            self.step = t + 1
            actions = self.actions_np[t]
            return actions + start if start else actions
        x = self._inputs(obs)
        activation = np.tanh if self.tanh else _relu
        # np.dot: for 2-D operands the same BLAS product as matmul, with less per-call work
        for (weight_t, bias), hidden in zip(self.layers, self.hidden, strict=False):
            np.dot(x, weight_t, out=hidden)
            hidden += bias
            x = activation(hidden, out=hidden)
        weight_t, bias = self.layers[-1]
        logits = np.dot(x, weight_t, out=self.logits[t])
        logits += bias
        np.add(logits, self.noise[t], out=self.perturbed)
        actions = self.perturbed.argmax(axis=1, out=self.actions_np[t])
        self.step = t + 1
        return actions + start if start else actions

    @property
    def value_fn(self) -> Any:
        """`values`, or None when the sampler was made without a critic it can run."""
        return self.values if self.value_layers is not None else None

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's V(s) for observations [B, ...]: [B]."""
        assert self.value_layers is not None, "made without a critic: see value_fn"
        x = self._inputs(obs.numpy())
        if self.use_native and self._value_net is not None:
            out = np.empty((len(x), 1), _F32)
            kernels().forward(*self._value_net, self.activation_code, _contiguous(x, _F32), out)
            return torch.from_numpy(out[:, 0])
        activation = np.tanh if self.tanh else _relu
        for weight_t, bias in self.value_layers[:-1]:
            x = np.matmul(x, weight_t)
            x += bias
            activation(x, out=x)
        weight_t, bias = self.value_layers[-1]
        out = np.matmul(x, weight_t)[:, 0]
        out += bias
        return torch.from_numpy(out)

    def logprobs(self) -> torch.Tensor:
        """log pi(a_t | s_t) of the actions sampled so far: [steps taken, N]."""
        taken = self.step
        logits = self.logits[:taken]
        shifted = logits - _last_axis(np.maximum, logits)
        logprobs = shifted - np.log(_last_axis(np.add, np.exp(shifted)))
        chosen = np.take_along_axis(logprobs, self.actions_np[:taken, :, None], axis=-1)
        return torch.from_numpy(chosen[..., 0])


def _numpy_layers(network: nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each Linear of `network` as (W^T [in, out] contiguous, bias [out]), float32 copies."""
    return [
        (
            np.ascontiguousarray(layer.weight.detach().numpy().T),
            layer.bias.detach().numpy().copy(),
        )
        for layer in _linears(network)
    ]


def _native_net(layers: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """A network as the native kernels take it: its sizes [in, h1, ..., out] and the
    addresses of each layer's W^T and bias (the arrays in `layers`, which must outlive it)."""
    dims = np.array([layers[0][0].shape[0], *(w.shape[1] for w, _ in layers)], np.int64)
    addresses = []
    for weight_t, bias in layers:
        assert weight_t.dtype == _F32 and bias.dtype == _F32 and weight_t.flags.c_contiguous
        addresses += [weight_t.ctypes.data, bias.ctypes.data]
    return dims, np.array(addresses, np.int64)


def _last_axis(ufunc: np.ufunc, x: np.ndarray) -> np.ndarray:
    """`ufunc.reduce(x, axis=-1, keepdims=True)` for a few actions, column by column in the
    same order. NumPy reduces a short last axis row by row: over 2 actions that costs ~35 ns
    a row (72 us for a CartPole rollout's [32, 64, 2] logits), two column ops ~2 us."""
    columns = x.shape[-1]
    if columns > 16:
        return ufunc.reduce(x, axis=-1, keepdims=True)
    if columns == 1:
        return x.copy()
    out = ufunc(x[..., :1], x[..., 1:2])
    for column in range(2, columns):
        ufunc(out, x[..., column : column + 1], out=out)
    return out


def _relu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0, out=out)


def _contiguous(array: np.ndarray, dtype: type) -> np.ndarray:
    """`array` as a C-contiguous array of `dtype`, copied only where it is not one already."""
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=dtype)
