"""PettingZoo environments in payoff: multi-agent envs seen through Gymnasium's interfaces.

Two wrappers around a PettingZoo *parallel* env, both registered as `payoff/PettingZoo-v0`
(pass the PettingZoo env with `env.kwargs.env_id`):

- `AgentsVectorEnv` (the vector entry point): every agent of every env copy is one slot of
  a Gymnasium vector env. A single-agent learner (PPO) on it is a set of *independent
  learners with shared parameters*; `agent_id: true` appends a one-hot agent id to each
  observation so the shared network can still act differently per agent. This is how
  `algo: ippo` trains cooperative (MPE simple_spread) and competitive (rock-paper-scissors)
  envs.
- `SingleAgentEnv` (the plain entry point): one agent learns, the others play uniformly
  at random; a standard Gymnasium env (it passes `check_env`), used for evaluation.

Env ids: PettingZoo's registry ids ('classic/rps-v2', 'sisl/pursuit-v5', ...), a module
that has `parallel_env()` ('mpe2.simple_spread_v3'), or 'package.module:factory' for your own. Turn-based AEC games with action masks
(tic-tac-toe, Connect Four) are played with `play_aec`, e.g. by an AlphaZero agent.

Not supported, with a clear error: agents that join or leave during an episode (all agents
must be present from reset until the episode ends for all of them together), agents with
different observation or action spaces, and non-Box/Discrete spaces.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from payoff.core.errors import EnvError
from payoff.core.imports import import_object, refuse_untrusted


def require_pettingzoo() -> Any:
    try:
        import pettingzoo
    except ImportError:
        raise EnvError(
            "PettingZoo is not installed; install payoff's multi-agent extra: "
            "pip install 'payoff[multiagent]'"
        ) from None
    return pettingzoo


# The packages PettingZoo's envs ship in; a module elsewhere is the user's own code.
PETTINGZOO_PACKAGES = ("pettingzoo", "mpe2", "magent2")


def make_pettingzoo(env_id: str, api: str = "parallel", **kwargs: Any) -> Any:
    """A PettingZoo env from a registry id ('classic/rps-v2') or a module ('mpe2.simple_spread_v3')."""
    pettingzoo = require_pettingzoo()
    if ":" in env_id:  # 'package.module:factory', for your own envs
        # imported as env ids are, from the working folder too; a loaded file's is refused
        made = import_object(env_id, "env.kwargs.env_id", EnvError)(**kwargs)
        aec = callable(getattr(made, "agent_iter", None)) and callable(getattr(made, "last", None))
        if api == "parallel" and aec:  # an AECEnv: one agent acts at a time
            raise EnvError(
                f"{env_id!r} made an AEC env ({type(made).__name__}: agents act one at a "
                f"time); IPPO steps every agent at once and needs a ParallelEnv: return "
                f"pettingzoo.utils.conversions.aec_to_parallel(env) from your factory"
            )
        return made
    if "/" not in env_id:
        if env_id.partition(".")[0] not in PETTINGZOO_PACKAGES:
            # Importing a module runs it: only PettingZoo's own packages on a loaded file's word.
            refuse_untrusted("env.kwargs.env_id", env_id)
        try:
            module = importlib.import_module(env_id)
        except ImportError as err:
            raise EnvError(
                f"cannot import PettingZoo env module {env_id!r} ({err}); give a registry id "
                f"such as 'classic/rps-v2' or an installed module such as 'mpe2.simple_spread_v3'"
            ) from None
        maker = getattr(module, "parallel_env" if api == "parallel" else "env", None)
        if maker is None:
            raise EnvError(
                f"module {env_id!r} has no {'parallel_env' if api == 'parallel' else 'env'}()"
                + (
                    ": a turn-based game (PettingZoo's classic envs) is played one agent at a "
                    "time; AlphaZero plays payoff's games (algo: alphazero, game: tictactoe | "
                    "connect4), and play_aec plays a policy on an AEC env"
                    if api == "parallel"
                    else ""
                )
            )
        return maker(**kwargs)
    try:
        return pettingzoo.make(api, env_id, **kwargs)
    except Exception as err:  # PettingZoo raises several kinds for unknown ids and bad kwargs
        raise EnvError(f"cannot make PettingZoo {api} env {env_id!r}: {err}") from None


def _flat_space(
    space: gym.Space, env_id: str
) -> tuple[np.ndarray, np.ndarray, Callable[[Any], np.ndarray]]:
    """(low, high, encoder) turning one agent's observation into a float32 vector."""
    if isinstance(space, gym.spaces.Box):
        width = int(np.prod(space.shape))
        low, high = space.low.reshape(width), space.high.reshape(width)
        return low, high, lambda obs: np.asarray(obs, dtype=np.float32).reshape(width)
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        return (
            np.zeros(n),
            np.ones(n),
            lambda obs: np.eye(n, dtype=np.float32)[int(obs) - int(space.start)],
        )
    raise EnvError(
        f"PettingZoo env {env_id!r} has observation space {space}; payoff's multi-agent wrappers "
        f"take Box or Discrete observations (dict observations with action masks are for "
        f"turn-based games: use play_aec or AlphaZero)"
    )


class _Agents:
    """What both wrappers need: the env, its fixed agent list, and observation encoding."""

    def __init__(self, env_id: str, agent_id: bool, env_kwargs: dict[str, Any]):
        self.env_id = env_id
        self.env = make_pettingzoo(env_id, "parallel", **env_kwargs)
        self.agents = list(self.env.possible_agents)
        spaces = [self.env.observation_space(a) for a in self.agents]
        actions = [self.env.action_space(a) for a in self.agents]
        if any(s != spaces[0] for s in spaces) or any(a != actions[0] for a in actions):
            raise EnvError(
                f"PettingZoo env {env_id!r} gives its agents different observation or action "
                f"spaces; shared-parameter learners need them equal. SuperSuit's "
                f"pad_observations_v0 and pad_action_space_v0 pad them to one shape (wrap the "
                f"env in your own factory, env.kwargs.env_id=my_module:factory)"
            )
        if not isinstance(actions[0], gym.spaces.Discrete | gym.spaces.Box):
            raise EnvError(
                f"PettingZoo env {env_id!r} has action space {actions[0]}; need Discrete or Box"
            )
        self.action_space = actions[0]
        low, high, self.encode = _flat_space(spaces[0], env_id)
        self.width = len(low)
        self.agent_id = agent_id
        if agent_id:  # the one-hot id columns lie in [0, 1]
            low = np.concatenate([low, np.zeros(len(self.agents))])
            high = np.concatenate([high, np.ones(len(self.agents))])
        self.observation_space = gym.spaces.Box(
            low.astype(np.float32), high.astype(np.float32), dtype=np.float32
        )

    def observe(self, observations: dict[str, Any]) -> np.ndarray:
        """[n_agents, size] observations in possible_agents order (+ one-hot ids).

        An agent missing from `observations` (some envs drop finished agents) gets zeros;
        that only happens for the final observation, which is not learned from.
        """
        zeros = np.zeros(self.width, dtype=np.float32)
        obs = np.stack(
            [self.encode(observations[a]) if a in observations else zeros for a in self.agents]
        )
        if self.agent_id:
            obs = np.concatenate([obs, np.eye(len(self.agents), dtype=np.float32)], axis=1)
        return obs

    def check_agents(self, present: list[str] | Any, when: str) -> None:
        if list(present) != self.agents and set(present) != set(self.agents):
            joined = sorted(set(present) - set(self.agents))
            left = sorted(set(self.agents) - set(present))
            raise EnvError(
                f"PettingZoo env {self.env_id!r}: agents changed {when} (joined: {joined}, left: "
                f"{left}). payoff's multi-agent wrappers need every agent present from reset until "
                f"the episode ends for all of them together; envs where agents die or spawn "
                f"(e.g. knights_archers_zombies) are not supported"
            )

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        """Step with one action per agent; (obs [n, size], rewards [n], terminated, truncated)."""
        action_dict = {
            a: (int(act) if isinstance(self.action_space, gym.spaces.Discrete) else act)
            for a, act in zip(self.agents, actions, strict=True)
        }
        observations, rewards, terminations, truncations, _ = self.env.step(action_dict)
        ended = [a for a in self.agents if terminations.get(a) or truncations.get(a)]
        if ended and len(ended) != len(self.agents):
            raise EnvError(
                f"PettingZoo env {self.env_id!r}: agents {ended} finished while others play on; "
                f"payoff's multi-agent wrappers need all agents to finish together "
                f"(agents leaving mid-episode are not supported)"
            )
        if not ended:
            self.check_agents(list(observations), "during the episode")
        reward = np.array([float(rewards.get(a, 0.0)) for a in self.agents], dtype=np.float32)
        terminated = any(terminations.get(a, False) for a in self.agents)
        truncated = not terminated and any(truncations.get(a, False) for a in self.agents)
        return self.observe(observations), reward, terminated, truncated

    def reset(self, seed: int | None) -> np.ndarray:
        observations, _ = self.env.reset(seed=seed)
        self.check_agents(list(self.env.agents), "at reset")
        return self.observe(observations)


def team_env(kwargs: dict[str, Any], render_mode: str | None = None) -> _Agents:
    """One copy of the parallel env `payoff/PettingZoo-v0`'s kwargs name (env_id, agent_id
    and the env's own), stepped with one action per agent: what a team GIF plays."""
    kwargs = dict(kwargs)
    env_id = str(kwargs.pop("env_id", "classic/rps-v2"))
    agent_id = bool(kwargs.pop("agent_id", True))
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    return _Agents(env_id, agent_id, kwargs)


class AgentsVectorEnv(gym.vector.VectorEnv):
    """Every agent of `num_envs // n_agents` copies of a parallel env, as one vector env.

    Slot i is agent i % n_agents of copy i // n_agents. Autoreset follows Gymnasium 1.x's
    NEXT_STEP mode: the step after a copy's episode ends resets that copy (its agents'
    actions are ignored), which payoff's VectorRunner expects.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int,
        env_id: str = "classic/rps-v2",
        agent_id: bool = True,
        **env_kwargs: Any,
    ):
        first = _Agents(env_id, agent_id, env_kwargs)
        n = len(first.agents)
        if num_envs % n:
            raise EnvError(
                f"num_envs {num_envs} must be a multiple of the {n} agents of {env_id!r} "
                f"(each vector slot is one agent), e.g. {n * max(1, num_envs // n)}"
            )
        self.copies = [first] + [
            _Agents(env_id, agent_id, env_kwargs) for _ in range(num_envs // n - 1)
        ]
        self.n_agents = n
        self.num_envs = num_envs
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = gym.vector.utils.batch_space(first.observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(first.action_space, num_envs)
        self._autoreset = np.zeros(len(self.copies), dtype=bool)
        self._seed: int | None = None
        self._episode = np.zeros(len(self.copies), dtype=np.int64)
        self.render_mode = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._seed = seed
        self._episode[:] = 0
        self._autoreset[:] = False
        obs = [c.reset(None if seed is None else seed + k) for k, c in enumerate(self.copies)]
        return np.concatenate(obs), {}

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions)
        n = self.n_agents
        obs, rewards = [], []
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        for k, copy in enumerate(self.copies):
            slots = slice(k * n, (k + 1) * n)
            if self._autoreset[k]:
                self._episode[k] += 1
                seed = (
                    None if self._seed is None else self._seed + k + 10_000 * int(self._episode[k])
                )
                obs.append(copy.reset(seed))
                rewards.append(np.zeros(n, dtype=np.float32))
                self._autoreset[k] = False
                continue
            o, r, term, trunc = copy.step(actions[slots])
            obs.append(o)
            rewards.append(r)
            terminated[slots], truncated[slots] = term, trunc
            self._autoreset[k] = term or trunc
        return np.concatenate(obs), np.concatenate(rewards), terminated, truncated, {}

    def close_extras(self, **kwargs: Any) -> None:
        for copy in self.copies:
            copy.env.close()


class SingleAgentEnv(gym.Env):
    """One agent of a parallel env learns; every other agent plays uniformly at random."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        env_id: str = "classic/rps-v2",
        agent_id: bool = True,
        learner: int = 0,
        **env_kwargs: Any,
    ):
        self.inner = _Agents(env_id, agent_id, env_kwargs)
        if not 0 <= learner < len(self.inner.agents):
            raise EnvError(
                f"learner must index one of the {len(self.inner.agents)} agents, got {learner}"
            )
        self.learner = learner
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self._others = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._others = np.random.default_rng(seed)
        self.inner.action_space.seed(None if seed is None else seed + 1)
        return self.inner.reset(seed)[self.learner], {}

    def step(self, action: Any):
        actions = [self.inner.action_space.sample() for _ in self.inner.agents]
        actions[self.learner] = action
        obs, rewards, terminated, truncated = self.inner.step(np.asarray(actions))
        return obs[self.learner], float(rewards[self.learner]), terminated, truncated, {}


def action_mask(observation: Any, env_id: str = "the env") -> np.ndarray:
    """The bool legal-move mask of a turn-based PettingZoo observation, or a clear error."""
    if not isinstance(observation, dict) or "action_mask" not in observation:
        keys = list(observation) if isinstance(observation, dict) else type(observation).__name__
        raise EnvError(
            f"{env_id}'s observations carry no 'action_mask' (got {keys}); turn-based play "
            f"needs the legal moves, as PettingZoo's classic games give them"
        )
    return np.asarray(observation["action_mask"]).astype(bool)


def play_aec(
    env: Any, policies: dict[str, Callable[[Any], int]], seed: int = 0
) -> dict[str, float]:
    """Play one episode of an AEC env; `policies[agent](observation) -> action`.

    Returns each agent's total reward. Every chosen action is checked against the action
    mask, so a policy that plays an illegal move fails loudly instead of losing quietly.
    """
    env.reset(seed=seed)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, _ = env.last()
        totals[agent] += float(reward)
        if terminated or truncated:
            env.step(None)
            continue
        mask = action_mask(observation, getattr(env, "metadata", {}).get("name", "env"))
        action = int(policies[agent](observation))
        if not mask[action]:
            raise EnvError(
                f"{agent} chose illegal action {action}; legal: {np.flatnonzero(mask).tolist()}"
            )
        env.step(action)
    return totals
