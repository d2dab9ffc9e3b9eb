"""Independent PPO (IPPO) for PettingZoo parallel envs, with parameters shared by all agents.

Each agent runs its own PPO learner on its own observations and rewards, treating the
other agents as part of the environment (which is what makes multi-agent learning hard:
that environment changes as the others learn). Sharing one actor and one critic among all
agents, with a one-hot agent id appended to each observation, keeps it one network and
pools every agent's experience into each update (de Witt et al. 2020, "Is Independent
Learning All You Need in the StarCraft Multi-Agent Challenge?").

Mechanically this is payoff's PPO (payoff.algos.ppo, unchanged) on `payoff/PettingZoo-v0`,
the vector env in which every agent of every env copy is one slot
(payoff.envs.pettingzoo.AgentsVectorEnv). IPPO adds the checks and an evaluation in which
all agents follow the learned policy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from payoff.algos.ppo import PPO, PPOConfig
from payoff.core.config import MAX_ENV_COPIES, in_range
from payoff.core.errors import ConfigError
from payoff.envs.make import EnvConfig
from payoff.rollout.evaluate import EvalResult, record_team_frames
from payoff.rollout.vector import evaluate_batched

PETTINGZOO_ID = "payoff/PettingZoo-v0"


def _simple_spread() -> EnvConfig:
    return EnvConfig(
        id=PETTINGZOO_ID,
        kwargs={"env_id": "mpe2.simple_spread_v3", "N": 3, "max_cycles": 25, "agent_id": True},
    )


@dataclass
class IPPOConfig(PPOConfig):
    """IPPO. All PPO keys apply (see payoff.algos.ppo.PPOConfig); what differs:

    env: id payoff/PettingZoo-v0 with kwargs env_id (a PettingZoo registry id such as
        'classic/rps-v2', or a module such as 'mpe2.simple_spread_v3'), agent_id (append a
        one-hot agent id to observations; default true), and the env's own kwargs.
    num_envs: vector slots = env copies x agents. Trap: it must be a multiple of the
        number of agents (3 for simple_spread with N=3).
    eval_episodes / final_eval_episodes: episodes (env copies) in which every agent follows
        the deterministic policy; the reported return is the mean per agent.
    """

    env: EnvConfig = field(default_factory=_simple_spread)
    # two copies of simple_spread's 3 agents (PPO's 8 is no multiple of 3)
    num_envs: int = field(default=6, metadata=in_range(1, MAX_ENV_COPIES))
    vectorization: str = "batched"  # type: ignore[assignment]

    def validate(self) -> None:
        from payoff.envs.pettingzoo import require_pettingzoo

        require_pettingzoo()  # without the multiagent extra: one line saying what to install
        super().validate()
        if self.env.id != PETTINGZOO_ID:
            raise ConfigError(
                f"ippo trains PettingZoo parallel envs through env id {PETTINGZOO_ID!r} "
                f"(with kwargs env_id: <pettingzoo id>), got {self.env.id!r}; use algo: ppo for "
                f"single-agent Gymnasium envs"
            )
        if self.vectorization != "batched":
            raise ConfigError(
                f"ippo needs vectorization 'batched' (one vector slot per agent), got {self.vectorization!r}"
            )


class IPPO(PPO):
    """PPO with one actor/critic shared by all agents of a PettingZoo parallel env."""

    config: IPPOConfig

    def setup(self) -> None:
        super().setup()
        self.n_agents = int(self.envs.n_agents)  # type: ignore[attr-defined]

    def evaluate(self, episodes: int = 20, seed: int | None = None) -> EvalResult:
        """All agents play the deterministic shared policy; returns are per agent."""
        seed = self.config.seed + 1_000_000 if seed is None else seed
        self.actor.eval()
        result = evaluate_batched(
            self.config.env,
            lambda obs: self.actor.to_env(self.actor.mode(obs)),
            episodes * self.n_agents,
            seed,
            "batched",
            device=self.device,
        )
        self.actor.train()
        # n_agents returns an episode: the mean is per agent, the count is of episodes
        return dataclasses.replace(result, episodes=episodes)

    def render_frames(self, policy: Any, episodes: int, seed: int) -> list[Any]:
        """Episodes in which every agent plays `policy` (the shared deterministic one)."""
        return record_team_frames(self.config.env, policy, episodes, seed)


ALGORITHM = IPPO
