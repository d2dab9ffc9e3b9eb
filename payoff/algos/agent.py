"""`Agent`: an algorithm that acts in an environment.

`predict(observation)` gives Stable-Baselines3's (action, state) pair and `act` the action
alone; `evaluate` runs the deterministic policy on fresh episodes (any env, with its own
seeds), `record_gif` renders some, and `evaluate_returns` / `finish_returns` are the
periodic and final evaluations the training loop calls. Training, saving and loading are
`Algorithm`'s (payoff/algos/base.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from payoff.algos.base import NO_FINAL_EVALUATION, Algorithm, check_deterministic, same_layout
from payoff.core.config import from_dict
from payoff.core.errors import ConfigError, EnvError
from payoff.envs.make import EnvConfig, env_config_of, make_env
from payoff.rollout.evaluate import EvalResult, evaluate_policy, record_frames
from payoff.rollout.vector import make_vector_env
from payoff.track.media import write_gif


class Agent(Algorithm):
    """An algorithm whose product acts in an environment: `act` (the action for an
    observation) and `predict` (SB3's (action, state) pair around it), `evaluate` on fresh
    episodes (episode statistics), `record_gif`."""

    def progress_postfix(self) -> dict[str, Any]:
        """The bar's `ret`: the mean return of the recent training episodes, a dash until
        the first log that has one (0 would read as a return of zero)."""
        return {"ret": float(np.mean(self.recent_returns)) if self.recent_returns else "-"}

    @contextmanager
    def predict_streams(self, exploring: bool = True) -> Iterator[None]:
        """predict's random draws come from streams of its own: while it runs, the torch
        stream (the CPU's, and the GPU's where the agent trains on one) and `self.rng` are
        swapped for predict's, so that exploring predictions between learn() calls change
        nothing in training (three of SAC's moved a run's final return from -1131.9 to
        -872.9). exploring=False (a deterministic predict, which draws nothing) swaps
        nothing."""
        if not exploring:
            yield
            return
        rng = getattr(self, "rng", None)
        device = getattr(self, "device", None)
        cuda = isinstance(device, torch.device) and device.type == "cuda"

        def current() -> tuple[Any, ...]:
            return (
                torch.get_rng_state(),
                torch.cuda.get_rng_state(device) if cuda else None,
                rng.bit_generator.state if rng is not None else None,
            )

        def use(state: tuple[Any, ...]) -> None:
            torch.set_rng_state(state[0])
            if cuda and state[1] is not None:
                torch.cuda.set_rng_state(state[1], device)
            if rng is not None and state[2] is not None:
                rng.bit_generator.state = state[2]

        training = current()
        if not hasattr(self, "_predict_state"):
            start = self._predict_seed  # seeded_predictions' seed, else the run's
            seed = (getattr(self.config, "seed", 0) if start is None else start) + 3_000_000
            if cuda:
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(seed)  # (training's state is restored below)
            self._predict_state = (
                torch.Generator().manual_seed(seed).get_state(),
                torch.cuda.get_rng_state(device) if cuda else None,
                np.random.default_rng(seed).bit_generator.state if rng is not None else None,
            )
        use(self._predict_state)
        try:
            yield
        finally:
            self._predict_state = current()
            use(training)

    _predict_seed: int | None = None  # set by seeded_predictions: the stream to start from

    @contextmanager
    def seeded_predictions(self, seed: int) -> Iterator[None]:
        """While active, exploring predictions draw from a stream started from `seed` (not
        from the one predict() calls continue), so that a stochastic evaluate with a given
        seed plays the same episodes each time; afterwards predict's own stream goes on
        where it was."""
        kept = self.__dict__.pop("_predict_state", None)
        self._predict_seed = seed
        try:
            yield
        finally:
            self._predict_seed = None
            self.__dict__.pop("_predict_state", None)
            if kept is not None:
                self._predict_state = kept

    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """The action for one observation (or actions for a batch of them), alone: payoff's
        single-value form of `predict`. Each agent implements it.

        deterministic: its most likely action (False: one sampled, as in training).
        """
        raise NotImplementedError

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[Any, Any]:
        """(action, state) as Stable-Baselines3's predict returns, in its argument order:
        `action, _ = agent.predict(obs)`. The action is `act`'s, for one observation or a
        batch; state is None, since this policy keeps none (RecurrentPPO returns its hidden
        state here).

        state: None (what the previous call returned, passed back in SB3 loops); anything
            else is refused: a feed-forward policy has no state to carry.
        episode_start: accepted and unused, as SB3 passes it for every policy.
        deterministic: True by default (SB3's default is False): the most likely action;
            False samples one, from random streams of predict's own.
        """
        check_deterministic(deterministic, "predict")
        if state is not None:
            array = isinstance(state, np.ndarray | torch.Tensor)
            given = f"an array of shape {tuple(state.shape)}" if array else repr(state)[:60]
            raise ConfigError(
                f"predict(state=...): {type(self).__name__}'s policy is feed-forward and keeps "
                f"no state, got state={given}; pass None (what predict returned) or "
                f"nothing. The second positional argument is SB3's state: give deterministic "
                f"by name, predict(obs, deterministic=False)"
            )
        return self.act(observation, deterministic=deterministic), None

    @property
    def num_timesteps(self) -> int:
        """Env steps trained so far: Stable-Baselines3's name. payoff's own counter is
        `step`, in the unit of the training length (`total_key`), which is env steps for
        most agents; Q-learning counts episodes there and env steps here."""
        if self.total_key == "total_steps":
            return int(self.step)
        env_steps = getattr(self, "env_steps", None)
        if env_steps is None:
            raise AttributeError(
                f"{type(self).__name__} counts its training in {self.total_key} "
                f"(agent.step = {self.step}), not in env steps"
            )
        return int(env_steps)

    def get_env(self) -> Any:
        """A new env like the one this agent trains on, to play it yourself: a vector env
        of `num_envs` for agents that train on several, else one env. Stable-Baselines3's
        get_env() returns the training VecEnv itself; stepping payoff's training envs would
        move them under the rollout that holds their last observations, so this is a fresh
        copy (a vector env you passed in is returned as it is). Gymnasium's API: reset()
        gives (obs, info), step() five values."""
        env = getattr(self.config, "env", None)
        if not isinstance(env, EnvConfig):
            raise ConfigError(f"{type(self).__name__} trains on no Gymnasium env of its own")
        num_envs = getattr(self.config, "num_envs", None)
        if env.vector is not None or num_envs:
            return make_vector_env(
                env, num_envs or env.vector.num_envs, getattr(self.config, "vectorization", "auto")
            )
        return make_env(env)

    def evaluate(
        self,
        episodes: int | None = None,
        seed: int | None = None,
        deterministic: bool = True,
        env: Any = None,
        *,
        n_eval_episodes: int | None = None,
        return_episode_rewards: bool | None = None,
    ) -> EvalResult:
        """The policy on `episodes` (default 100) fresh episodes seeded seed, seed + 1, ...

        deterministic: its most likely action (False: actions sampled, as in training).
        env: evaluate there instead of the training env: an id, a gymnasium.Env, a function
            that makes one, or EnvConfig keys; its spaces must be those the agent trained on.
        The result's episode_returns and episode_lengths hold each episode's
        (Stable-Baselines3's return_episode_rewards). n_eval_episodes: SB3's name for
        `episodes`.
        """
        if return_episode_rewards is not None:
            raise ConfigError(
                "evaluate() has no return_episode_rewards (Stable-Baselines3's): the result "
                "always holds each episode's, result.episode_returns and result.episode_lengths"
            )
        if n_eval_episodes is not None:  # Stable-Baselines3's name for `episodes`
            if episodes not in (None, n_eval_episodes):
                raise ConfigError(
                    f"evaluate() got episodes={episodes} and n_eval_episodes="
                    f"{n_eval_episodes}: give one (n_eval_episodes is SB3's name for episodes)"
                )
            episodes = n_eval_episodes
        episodes = 100 if episodes is None else episodes
        check_deterministic(deterministic, "evaluate")
        seed = self.config.seed + 1_000_000 if seed is None else seed
        config = self.config.env if env is None else self.evaluation_env(env)
        with nullcontext() if deterministic else self.seeded_predictions(seed):
            return self.evaluate_on(config, episodes, seed, deterministic)

    def evaluate_on(
        self, env: EnvConfig, episodes: int, seed: int, deterministic: bool
    ) -> EvalResult:
        """`evaluate`'s episodes, played one at a time through `act` (an agent with a
        batched policy plays them all at once instead)."""
        return evaluate_policy(
            env, lambda obs: self.act(obs, deterministic=deterministic), episodes, seed
        )

    def evaluation_env(self, env: Any) -> EnvConfig:
        """`evaluate(env=...)`'s env as config, refused (EnvError) where its observation or
        action space does not fit the agent's: another kind of space, another shape or
        number of choices. Box bounds and dtype may differ (wrappers such as
        NormalizeObservation or ClipAction change them): the agent reads the observations
        and writes its actions in the shapes it was trained on."""
        given = env_config_of(env)
        config = given if isinstance(given, EnvConfig) else from_dict(EnvConfig, given, "env.")
        if self.spaces():
            probe = make_env(config)
            try:
                for key in ("observation_space", "action_space"):
                    trained, found = getattr(self, key), getattr(probe, key)
                    if not same_layout(trained, found):
                        raise EnvError(
                            f"evaluate(env=...): env {config.id!r} has {key} {found!r}, but "
                            f"this agent was trained on {self.config.env.id!r} with {trained!r}"
                        )
            finally:
                probe.close()
        return config

    def record_gif(
        self, path: str | Path, episodes: int = 1, seed: int | None = None, fps: int = 8
    ) -> Path:
        """Render episodes of the deterministic policy to a GIF."""
        seed = self.config.seed + 2_000_000 if seed is None else seed
        frames = self.render_frames(lambda obs: self.act(obs, deterministic=True), episodes, seed)
        return write_gif(frames, path, fps=fps)

    def render_frames(self, policy: Any, episodes: int, seed: int) -> list[Any]:
        """rgb frames of `episodes` episodes of `policy` in the config's env (what
        `record_gif` draws; a multi-agent learner renders its whole team instead)."""
        return record_frames(self.config.env, policy, episodes, seed)

    # ---- evaluation in the loop: scored by the episode return ----------------------------
    def evaluate_returns(self) -> None:
        """Periodic evaluation on fresh episodes (config.eval_episodes); the run counts as
        solved once the mean return reaches config.stop_at_return."""
        config = self.config
        result = self.evaluate(config.eval_episodes, seed=config.seed + 10_000 + self.step)
        self.evals.append((self.step, result.mean_return))
        scores = {"eval/mean_return": result.mean_return, "eval/std_return": result.std_return}
        if result.success_rate is not None:  # the env says which episodes succeeded
            scores["eval/success_rate"] = result.success_rate
        self.log(self.step, **scores)
        if config.stop_at_return is not None and result.mean_return >= config.stop_at_return:
            self.solved_at = self.step

    def finish_returns(self, **summary: Any) -> None:
        """Final evaluation (config.final_eval_episodes), logged and written to summary.json;
        with final_eval_episodes 0 the summary says there was none."""
        episodes = self.config.final_eval_episodes
        final: dict[str, Any] = {"final_line": NO_FINAL_EVALUATION.format("final_eval_episodes=0")}
        if episodes > 0:
            result = self.evaluate(episodes)
            self.log(self.step, **{f"final/{k}": v for k, v in result.to_dict().items()})
            final = {"final_eval": result.to_dict()}
        if self.run is not None:
            self.run.write_summary(
                **final,
                steps=self.step,
                train_seconds=round(self.train_seconds, 2),
                solved_at_step=self.solved_at,
                **summary,
            )
