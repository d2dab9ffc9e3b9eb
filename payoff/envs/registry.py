"""Registers payoff's own environments with Gymnasium under the `payoff/` namespace.

Each entry point is a string, so registering imports nothing heavy.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym

PAYOFF_ENVS: dict[str, dict] = {}


def _register(env_id: str, entry_point: str, **kwargs: object) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, **kwargs)  # type: ignore[arg-type]
    PAYOFF_ENVS[env_id] = {"entry_point": entry_point, **kwargs}


# Envs are added here as they land, e.g.
# _register("payoff/CartPoleBatched-v1", "payoff.envs.cartpole:CartPoleEnv", max_episode_steps=500)

_register(
    "payoff/KartTrack-v0",
    "payoff.envs.kart:KartTrackEnv",
    vector_entry_point="payoff.envs.kart:KartVectorEnv",
)

_register("payoff/BoatRace-v0", "payoff.envs.hacking.boatrace:BoatRaceEnv", max_episode_steps=200)
_register("payoff/CleaningRobot-v0", "payoff.envs.hacking.cleaning:CleaningRobotEnv")

# Batched NumPy CartPole, identical to Gymnasium's CartPole-v1 (PPO/DQN use it for CartPole-v1).
_register(
    "payoff/CartPole-v1",
    "payoff.envs.cartpole:CartPoleEnv",
    vector_entry_point="payoff.envs.cartpole:CartPoleVectorEnv",
    max_episode_steps=500,
)

# CartPole with the velocities hidden (x and theta only): a partially observed task for
# recurrent policies (payoff.envs.pomdp).
_register(
    "payoff/CartPoleNoVelocity-v1",
    "payoff.envs.pomdp:CartPoleNoVelocityEnv",
    vector_entry_point="payoff.envs.pomdp:CartPoleNoVelocityVectorEnv",
    max_episode_steps=500,
)

# Meta-RL task distributions for RL² (payoff.envs.bandits, payoff.envs.gridgoal): each
# Gymnasium episode is a trial on a freshly drawn task.
_register(
    "payoff/BernoulliBandits-v0",
    "payoff.envs.bandits:BernoulliBanditsEnv",
    vector_entry_point="payoff.envs.bandits:BernoulliBanditsVectorEnv",
)
_register("payoff/GridGoal-v0", "payoff.envs.gridgoal:GridGoalEnv")

# Any PettingZoo parallel env (env.kwargs.env_id), one agent per vector slot; the plain
# entry point is one learning agent among random ones (payoff.envs.pettingzoo). Registered
# only with the multiagent extra installed (find_spec imports nothing).
if importlib.util.find_spec("pettingzoo") is not None:
    _register(
        "payoff/PettingZoo-v0",
        "payoff.envs.pettingzoo:SingleAgentEnv",
        vector_entry_point="payoff.envs.pettingzoo:AgentsVectorEnv",
    )
