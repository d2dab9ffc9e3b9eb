"""payoff's one accelerator, and the one place that chooses it.

Every network's math is written once, in torch, in payoff.models and payoff.algos: that is
the reference path, the one docs/architecture.md walks through. Where a small network's
Python per-call cost is the work, an accelerator does the same arithmetic with fewer calls:

- PPO's categorical actor-critic on the CPU: the native kernels (a C extension,
  `_kernels.c`, built at install): a rollout step's sampling, the critic's pass, each
  minibatch step with its Adam (`actor_critic.py`), and on payoff's batched CartPole the
  whole rollout in one call (`cartpole.py`, registered with the vector runner as that env's
  fused collector). Equal to the reference to float32 rounding (tests/test_accel.py,
  tests/test_native.py).
- DQN's Q-network on the CPU: its TD loss's gradient by hand in torch (`td.py`), the ops
  autograd runs in its order, so bitwise autograd's (tests/test_deeprl_fast_paths.py).

The config key `accelerate` picks, per run: `auto` (the default) runs the accelerator where
it applies and the reference elsewhere; `true` requires it and says why it cannot run;
`false` runs the reference. `ppo_accelerator` and `td_accelerator` are the dispatch.
"""

from __future__ import annotations

from typing import Any

from payoff.accel import cartpole as _cartpole  # noqa: F401  (registers the fused collector)
from payoff.accel.actor_critic import NativeActorCritic, NativeRolloutSampler, why_not
from payoff.accel.native import native_status
from payoff.accel.td import TDByHand, td_why_not
from payoff.core.errors import ConfigError

MODES = ("auto", True, False)

__all__ = [
    "MODES",
    "NativeActorCritic",
    "NativeRolloutSampler",
    "TDByHand",
    "native_status",
    "ppo_accelerator",
    "td_accelerator",
]


def _choose(mode: bool | str, reason: str | None, what: str) -> bool:
    """Whether to run the accelerator: `auto` where `reason` is None, `true` or an error."""
    if mode is False:
        return False
    if mode is True and reason is not None:
        raise ConfigError(
            f"accelerate: true, but {what} cannot run here: {reason}. Use accelerate: auto "
            f"(the accelerator where it applies) or false (the torch reference)"
        )
    return reason is None


def ppo_accelerator(
    mode: bool | str, actor: Any, critic: Any, flat: Any, optimizer: Any, clip_value: float | None
) -> tuple[NativeActorCritic | None, str]:
    """The native PPO step for these networks under `accelerate: mode` (None: the reference
    runs), and which path that is, in words."""
    reason = why_not(actor, critic, flat, optimizer)
    if reason is None and clip_value is not None:
        reason = "clip_value is set (the kernels' value loss is unclipped)"
    if not _choose(mode, reason, "the native PPO step"):
        why = "accelerate: false" if mode is False else f"accelerate: auto, and {reason}"
        return None, f"torch, the reference path ({why})"
    return NativeActorCritic(
        actor, critic, flat, optimizer
    ), f"{native_status()}; accelerate: {str(mode).lower()}"


def td_accelerator(mode: bool | str, q_net: Any, on_cpu: bool) -> TDByHand | None:
    """DQN's TD gradient by hand for `q_net` under `accelerate: mode`, or None."""
    reason = td_why_not(q_net, on_cpu)
    if not _choose(mode, reason, "the TD gradient by hand"):
        return None
    return TDByHand(q_net)
