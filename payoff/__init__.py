"""payoff: reinforcement learning by trial and error, end to end.

    from payoff import PPO
    agent = PPO("CartPole-v1").learn(50_000)
    action, _ = agent.predict(observation)   # as in Stable-Baselines3; agent.act(observation)

Every algorithm is importable from here (loaded on first use, so `import payoff` stays
light); `payoff.train.train(recipe, overrides)` runs a recipe as `payoff train` does. Importing
payoff registers its environments with Gymnasium (`gymnasium.make("payoff/KartTrack-v0")`
works in any code that imported payoff).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import payoff.envs.registry  # noqa: F401  (registers the payoff/ envs with Gymnasium)
from payoff.core.errors import PayoffError

if TYPE_CHECKING:
    from payoff.algos.a2c import A2C
    from payoff.algos.agent_grpo import AgentGRPO
    from payoff.algos.alphazero import AlphaZero
    from payoff.algos.bc import BC
    from payoff.algos.best_of_n import BestOfN
    from payoff.algos.dagger import DAgger
    from payoff.algos.dpo import DPO
    from payoff.algos.dqn import DQN
    from payoff.algos.es import ES
    from payoff.algos.grpo import GRPO
    from payoff.algos.ippo import IPPO
    from payoff.algos.mbpo import MBPO
    from payoff.algos.mbrl import MBRL
    from payoff.algos.ppo import PPO
    from payoff.algos.ppo_lagrangian import PPOLagrangian
    from payoff.algos.qlearning import QLearning
    from payoff.algos.recurrent_ppo import RecurrentPPO
    from payoff.algos.reinforce import Reinforce
    from payoff.algos.reinforce import Reinforce as REINFORCE
    from payoff.algos.reward_model import RewardModel
    from payoff.algos.rlhf_ppo import RLHFPPO
    from payoff.algos.sac import SAC
    from payoff.algos.sft import SFT
    from payoff.algos.td3 import TD3

__version__ = "0.1.0"

# public name -> "module:attribute", imported on first access
_LAZY = {
    "QLearning": "payoff.algos.qlearning:QLearning",
    "DQN": "payoff.algos.dqn:DQN",
    "PPO": "payoff.algos.ppo:PPO",
    "SAC": "payoff.algos.sac:SAC",
    "TD3": "payoff.algos.td3:TD3",
    "A2C": "payoff.algos.a2c:A2C",
    "RecurrentPPO": "payoff.algos.recurrent_ppo:RecurrentPPO",
    "Reinforce": "payoff.algos.reinforce:Reinforce",
    "REINFORCE": "payoff.algos.reinforce:Reinforce",
    "PPOLagrangian": "payoff.algos.ppo_lagrangian:PPOLagrangian",
    "IPPO": "payoff.algos.ippo:IPPO",
    "BC": "payoff.algos.bc:BC",
    "DAgger": "payoff.algos.dagger:DAgger",
    "AlphaZero": "payoff.algos.alphazero:AlphaZero",
    "ES": "payoff.algos.es:ES",
    "SFT": "payoff.algos.sft:SFT",
    "GRPO": "payoff.algos.grpo:GRPO",
    "DPO": "payoff.algos.dpo:DPO",
    "RewardModel": "payoff.algos.reward_model:RewardModel",
    "RLHFPPO": "payoff.algos.rlhf_ppo:RLHFPPO",
    "BestOfN": "payoff.algos.best_of_n:BestOfN",
    "AgentGRPO": "payoff.algos.agent_grpo:AgentGRPO",
    "MBPO": "payoff.algos.mbpo:MBPO",
    "MBRL": "payoff.algos.mbrl:MBRL",
}

__all__ = [
    "PayoffError",
    "__version__",
    "QLearning",
    "DQN",
    "PPO",
    "SAC",
    "TD3",
    "A2C",
    "RecurrentPPO",
    "Reinforce",
    "REINFORCE",
    "PPOLagrangian",
    "IPPO",
    "BC",
    "DAgger",
    "AlphaZero",
    "ES",
    "SFT",
    "GRPO",
    "DPO",
    "RewardModel",
    "RLHFPPO",
    "BestOfN",
    "AgentGRPO",
    "MBPO",
    "MBRL",
]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'payoff' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
