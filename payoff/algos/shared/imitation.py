"""What behavior cloning and DAgger share: config keys, the supervised loss, fitting, evaluation.

The learner is payoff's PPO actor (payoff.models.mlp.make_actor), so a cloned policy can be
saved with `save_policy` and handed to PPO as `init_from` ("imitation then RL").

Losses (one value per batch):
    Discrete actions:  cross-entropy  -log pi(a_expert | s)
    Box actions, 'mse': || mean(s) - a_expert ||^2            (the deterministic action)
    Box actions, 'nll': -log N(a_expert; mean(s), std)         (also learns the std)

Devices (config key `device`): the actor (and a prefitted critic) train on it. The dataset
stays in NumPy on the CPU and goes to the device once per epoch; experts and envs act on
the CPU, and the learner's actions come back as NumPy (`Actor.predict`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch

from payoff.algos.agent import Agent
from payoff.algos.base import (
    NO_FINAL_EVALUATION,
    AgentKeys,
    check_deterministic,
    restoring,
)
from payoff.core.config import MAX_BATCH, MAX_ENV_COPIES, MAX_WIDTH, absolute_path, in_range
from payoff.core.device import resolve_device
from payoff.core.errors import CheckpointError, ConfigError, EnvError
from payoff.core.imports import refuse_untrusted
from payoff.core.seeding import seed_everything
from payoff.envs.make import EnvConfig, make_env
from payoff.models.mlp import Actor, Critic, actor_for
from payoff.models.policy_file import save_policy
from payoff.rollout.evaluate import EvalResult
from payoff.rollout.experts import (
    EXPERTS,
    Expert,
    FunctionExpert,
    PolicyExpert,
    check_expert,
    make_expert,
)
from payoff.rollout.imitation import EpisodeTraces, discounted_returns, play_episodes

KART_ID = "payoff/KartTrack-v0"


def _kart() -> EnvConfig:
    return EnvConfig(id=KART_ID, kwargs={"track": "train"})


@dataclass
class ImitationConfig(AgentKeys):
    """Keys behavior cloning and DAgger share, beyond payoff.algos.base.AgentKeys (seed,
    threads, log/eval/checkpoint intervals in epochs or rounds, eval_episodes,
    final_eval_episodes).

    env: any Gymnasium env with Box observations and Discrete or Box actions.
    expert: who labels states: 'kart' (scripted KartTrack driver), 'cartpole' (scripted
        balancer), 'keyboard' (you, in a pygame window), or a path to a payoff run
        directory, a policy file or a file `Algo.save` wrote (any trained payoff agent).
        From Python also any function `fn(observations) -> actions` on a batch, or an
        object with `act(observations)`: BC(env, expert=my_fn). BC from `demonstrations`
        needs no expert (null).
    label_budget: how many states the expert labels in total. Compare imitation methods at
        equal label budgets: that is the expert's time, the scarce resource.
    loss: 'mse' or 'nll' for Box actions (ignored for Discrete: always cross-entropy).
        Trap: 'nll' also fits the std, which can collapse toward 0 on noiseless experts;
        when the policy will be fine-tuned by PPO, 'mse' keeps log_std at log_std_init.
    hidden / activation / log_std_init: the actor network (match PPO's to hand it over).
    normalize_obs: standardize observations with the statistics of the training data
        (stored in the actor). Trap: a feature the expert never varies gets a tiny std, so
        states where it does vary look extreme to the network (that is part of why
        behavior cloning is brittle).
    learning_rate / batch_size: Adam step size and minibatch size of the supervised fit.
    eval_tracks: for KartTrack, the track specs evaluated at the end (completion rate on
        each is reported: training family vs held-out family).
    export_policy: also write the trained actor to this file at the end (the run always
        has it as policy.safetensors), e.g. for a later `algo: ppo` with `init_from: <that file>`.
    value_prefit_steps: when > 0, also fit a critic (PPO's Critic, same hidden/activation)
        to the discounted returns of this many env steps of the cloned policy (sampling,
        as PPO will) and save it next to the actor, so PPO starts with sensible
        advantages instead of a random critic's. 0 saves the actor alone.
    value_gamma: the discount of those returns; use the PPO run's gamma.
    final_eval_episodes: 0 (none) in Python, 100 for `payoff train` runs (run_defaults).
    """

    run_defaults: ClassVar[dict[str, Any]] = {"final_eval_episodes": 100}  # payoff train runs

    env: EnvConfig = field(default_factory=_kart)
    expert: str | None = "kart"
    label_budget: int = field(default=2000, metadata=in_range(0, low_open=True))
    loss: Literal["mse", "nll"] = "mse"
    hidden: list[int] = field(
        default_factory=lambda: [64, 64], metadata=in_range(0, low_open=True, most=MAX_WIDTH)
    )
    activation: Literal["tanh", "relu", "gelu"] = "tanh"
    log_std_init: float = -1.0
    normalize_obs: bool = True
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    batch_size: int = field(default=256, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    eval_episodes: int = field(default=50, metadata=in_range(0, low_open=True, most=MAX_ENV_COPIES))
    final_eval_episodes: int = field(default=0, metadata=in_range(0, most=MAX_ENV_COPIES))
    eval_tracks: list[str] = field(default_factory=lambda: ["train", "heldout"])
    export_policy: str | None = None
    value_prefit_steps: int = field(default=0, metadata=in_range(0))
    value_gamma: float = field(default=0.99, metadata=in_range(0, 1))

    def __post_init__(self) -> None:
        if isinstance(self.expert, str) and self.expert not in (*EXPERTS, "keyboard"):
            # (a shipped expert's name is no path) saved absolute: found from any folder
            self.expert = absolute_path(self.expert)

    def validate(self) -> None:
        # Ranges of single keys (counts > 0, learning_rate > 0, ...) are checked by core.config.
        if not self.hidden:
            raise ConfigError("config key 'hidden' needs at least one layer width, e.g. [64, 64]")
        if self.expert is not None and not isinstance(self.expert, str):
            raise ConfigError(
                f"config key 'expert' is a name or a path here; pass a function or an object "
                f"with act() as BC(env, expert=...), not inside a config: got {self.expert!r}"
            )


# The scripted experts' names and the env ids they drive (prefixes)
SCRIPTED_EXPERTS = {"kart": "payoff/KartTrack", "cartpole": "CartPole"}


def imitation_loss(
    actor: Actor, observations: torch.Tensor, actions: torch.Tensor, loss: str
) -> torch.Tensor:
    """The supervised loss of `actor` on expert (state, action) pairs; see the module docstring."""
    if isinstance(actor.action_space, gym.spaces.Discrete):
        logprobs, _ = actor.log_prob_entropy(observations, actions)
        return -logprobs.mean()
    if isinstance(actor.action_space, gym.spaces.Box):  # a (2, 2) Box: the actor's d = 4
        actions = actions.reshape(len(actions), -1)
    if loss == "nll":
        logprobs, _ = actor.log_prob_entropy(observations, actions)
        return -logprobs.mean()
    return ((actor.mode(observations).reshape(len(actions), -1) - actions) ** 2).sum(-1).mean()


def fit_normalizer(actor: Actor, observations: np.ndarray) -> None:
    """Set the actor's observation statistics to those of `observations` (all of them)."""
    normalizer = actor.normalizer
    if not normalizer.enabled:
        return
    for name, start in (("mean", 0.0), ("var", 1.0), ("count", 1e-4)):
        getattr(normalizer, name).fill_(start)
    normalizer.update(torch.as_tensor(observations, dtype=torch.float32))


def expert_from_run(path: str | Path) -> Expert:
    """The trained policy of a payoff run directory (any agent algorithm) as an expert."""
    from payoff.algos import get_algorithm
    from payoff.core.errors import RunError
    from payoff.track.run import Run

    run = Run.open(path)
    algo = run.config.get("algo")
    if not algo:
        raise RunError(f"{str(path)!r} has no 'algo' in its config.yaml; cannot load its policy")
    cls = get_algorithm(str(algo))
    if not issubclass(cls, Agent):
        raise ConfigError(
            f"expert {str(path)!r} is a {cls.name} run, which does not act in an environment; "
            "an expert run must be an agent's (ppo, dqn, bc, ...)"
        )
    payload, _ = run.load_checkpoint(cls.name)
    return _agent_as_expert(cls._from_payload(payload, source=run.checkpoint_path()), path)


def expert_from_file(path: str | Path) -> Expert:
    """A policy file (`save_policy`, a run's policy.safetensors) or a file an agent's
    `save` wrote (PPO(...).save(path)) as an expert."""
    from payoff.algos import get_algorithm
    from payoff.track.checkpoint import load_state

    try:
        return PolicyExpert.load(path)
    except CheckpointError:
        payload = load_state(Path(path), "checkpoint")  # an agent's save file names its algo
        algo = payload.get("algo") if isinstance(payload, dict) else None
        if not isinstance(algo, str):
            raise
    cls = get_algorithm(algo)
    if not issubclass(cls, Agent):
        raise ConfigError(
            f"expert {str(path)!r} was saved by {algo}, which does not act in an environment"
        )
    return _agent_as_expert(cls.load(path), path)


def _agent_as_expert(algorithm: Agent, path: str | Path) -> Expert:
    actor = getattr(algorithm, "actor", None)
    if isinstance(actor, Actor):  # network policies answer a whole batch at once
        return PolicyExpert(lambda obs: actor.predict(obs, deterministic=True), str(path))
    return PolicyExpert(
        lambda obs: np.stack([np.asarray(algorithm.act(o)) for o in obs]), str(path)
    )


class ImitationAlgorithm(Agent):
    """Shared plumbing of BC and DAgger: actor, optimizer, dataset, fitting, evaluation."""

    def __init__(self, *args: Any, **kwargs: Any):
        # expert=<a function or an object with act()>: kept here, not in the config (which
        # records its name): a file cannot hold it, so a saved run asks for it again
        expert = kwargs.get("expert")
        self._expert_object: Expert | None = None
        if expert is not None and not isinstance(expert, str | Path):
            if not (callable(expert) or callable(getattr(expert, "act", None))):
                raise ConfigError(
                    f"config key 'expert' takes a name, a path, a function fn(observations) -> "
                    f"actions or an object with act(observations); got {expert!r}"
                )
            self._expert_object = expert if hasattr(expert, "act") else FunctionExpert(expert)
            source = getattr(expert, "source", "")  # a PolicyExpert knows its file: keep it
            name = getattr(expert, "__qualname__", None) or type(expert).__qualname__
            kwargs["expert"] = str(source) if source else f"python:{name}"
        super().__init__(*args, **kwargs)

    config: ImitationConfig
    saved: tuple[str, ...] = (
        "actor",
        "optimizer",
        "rng",
        "data_obs",
        "data_act",
        "labels",
        "gradient_steps",
        "fit_seconds",
    )

    def setup(self) -> None:
        config = self.config
        torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device)
        self.rng = seed_everything(config.seed)
        probe = make_env(config.env)
        self.observation_space, self.action_space = probe.observation_space, probe.action_space
        probe.close()
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise EnvError(
                f"imitation here needs Box observations; {config.env.id!r} has {self.observation_space}"
            )
        shifted = isinstance(self.action_space, gym.spaces.Discrete) and self.action_space.start
        if shifted or not isinstance(self.action_space, gym.spaces.Discrete | gym.spaces.Box):
            raise EnvError(
                f"behavior cloning and DAgger take Discrete (starting at 0) or Box actions; "
                f"{config.env.id!r} has {self.action_space} (PPO and A2C train on it)"
            )
        if config.export_policy:  # written at the end, also when a loaded run resumes
            refuse_untrusted("export_policy", config.export_policy, "a file to write")
        self.expert: Expert | None = self._make_expert()
        if self.expert is not None:
            check_expert(self.expert, self.observation_space, self.action_space)
        self.actor = actor_for(config, self.observation_space, self.action_space).to(self.device)
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.learning_rate)
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        obs_shape = tuple(self.observation_space.shape or ())
        act_shape = tuple(self.action_space.shape or ())
        self.data_obs = np.zeros((0, *obs_shape), dtype=np.float32)
        self.data_act = np.zeros((0, *act_shape), dtype=np.int64 if self.discrete else np.float32)
        self.labels = 0  # expert labels used so far
        self.gradient_steps = 0
        self.fit_seconds = 0.0  # time spent fitting (collection and evaluation excluded)

    def needs_expert(self) -> bool:
        """Whether this run asks an expert for labels (BC from demonstrations does not)."""
        return True

    def labeller(self) -> Expert:
        """The expert, to label states; a loaded run whose expert was a Python function
        has none until it is given again."""
        if self.expert is None:
            raise ConfigError(
                f"this {self.name} run's expert was a Python function ({self.config.expert}), "
                f"which a file cannot hold, so it cannot label more states: start a new "
                f"{type(self).__name__}(env, expert=fn)"
            )
        return self.expert

    def _make_expert(self) -> Expert | None:
        spec = self.config.expert
        if self._expert_object is not None:
            return self._expert_object
        if not self.needs_expert():
            return None
        if spec is None:
            raise ConfigError(
                f"{self.name} needs an expert to label states: set the config key 'expert' "
                f"(or, for BC, 'demonstrations' to learn from recorded ones)"
            )
        if spec.startswith("python:"):
            if restoring():  # predict and evaluate need no expert; labelling more does
                return None
            raise ConfigError(f"expert {spec!r} names a Python function; pass the function")
        if Path(spec).is_dir():
            return expert_from_run(spec)
        if Path(spec).is_file():
            return expert_from_file(spec)
        made_for = SCRIPTED_EXPERTS.get(spec)
        if made_for is not None and not self.config.env.id.startswith(made_for):
            env = self.config.env.id
            fits = [name for name, ids in SCRIPTED_EXPERTS.items() if env.startswith(ids)]
            expert = fits[0] if fits else f"runs/<a trained {env} run>"
            raise ConfigError(
                f"expert {spec!r} is payoff's scripted expert for {made_for}, and this run's "
                f"env is {env!r} (a recipe pointed at another env leaves its expert out, and "
                f"{self.name}'s default is 'kart'): set expert= to one for this env: a trained "
                f"run's folder, a policy file, or a function from Python; e.g. payoff train "
                f"{self.name} env.id={env} expert={expert}"
            )
        kwargs: dict[str, Any] = {}
        if spec == "kart":  # the scripted driver must know the track's width and speed
            options = ("half_width", "speed", "max_steer", "throttle")
            kwargs = {k: v for k, v in self.config.env.kwargs.items() if k in options}
        return make_expert(spec, self.action_space, **kwargs)

    def spaces(self) -> dict[str, str]:
        return {
            "observation_space": repr(self.observation_space),
            "action_space": repr(self.action_space),
        }

    # ---- acting -----------------------------------------------------------------------
    def act(self, observation: Any, deterministic: bool = True) -> Any:
        """Learner action(s) for one observation or a batch of them (so a trained learner
        serves as another's expert, `act(observations)`)."""
        check_deterministic(deterministic, "act")
        with self.predict_streams(exploring=not deterministic):
            return self.actor.act(observation, deterministic)

    def sample_actions(self, observations: np.ndarray) -> np.ndarray:
        """Sampled learner actions for a batch of observations (from predict's stream)."""
        return np.asarray(self.act(np.asarray(observations, np.float32), deterministic=False))

    # ---- learning ---------------------------------------------------------------------
    def add_data(self, observations: np.ndarray, actions: np.ndarray) -> None:
        self.data_obs = np.concatenate([self.data_obs, observations.astype(np.float32)])
        self.data_act = np.concatenate([self.data_act, actions.astype(self.data_act.dtype)])
        self.labels += len(actions)

    def fit_epoch(self) -> float:
        """One pass over the aggregated dataset in shuffled minibatches; mean loss."""
        started = time.time()
        obs = torch.as_tensor(self.data_obs, device=self.device)  # [N, obs_dim]
        actions = torch.as_tensor(self.data_act, device=self.device)
        order = torch.randperm(len(obs))  # on the CPU: the same order on any device
        total, batches = 0.0, 0
        for start in range(0, len(obs), self.config.batch_size):
            idx = order[start : start + self.config.batch_size]
            loss = imitation_loss(self.actor, obs[idx], actions[idx], self.config.loss)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach())
            batches += 1
            self.gradient_steps += 1
        self.fit_seconds += time.time() - started
        return total / max(batches, 1)

    # ---- evaluation -------------------------------------------------------------------
    def env_for(self, split: str | None) -> EnvConfig:
        """The env of one KartTrack track family (`split`), or the configured env (None)."""
        env = self.config.env
        if split is None:
            return env
        if env.id != KART_ID:
            raise ConfigError(f"--split picks KartTrack track families; {env.id!r} has none")
        return EnvConfig(id=env.id, kwargs={**env.kwargs, "track": split})

    def play(self, episodes: int, seed: int, split: str | None = None) -> EpisodeTraces:
        """Whole episodes of the deterministic learner, batched, with traces."""
        return play_episodes(self.env_for(split), self.act, episodes, seed)

    def evaluate(  # type: ignore[override]
        self,
        episodes: int = 100,
        seed: int | None = None,
        deterministic: bool = True,
        env: Any = None,
        split: str | None = None,
    ) -> EvalResult:
        """The learner on fresh episodes, played side by side: its most likely actions
        (deterministic=False: sampled), on the training env or `env` (spaces as trained); on
        KartTrack, `split` picks 'train' or 'heldout' tracks or one track spec."""
        check_deterministic(deterministic, "evaluate")
        if env is not None and split is not None:
            raise ConfigError("evaluate() takes env= or split=, not both")
        seed = self.config.seed + 1_000_000 if seed is None else seed
        config = self.env_for(split) if env is None else self.evaluation_env(env)
        if deterministic:
            traces = play_episodes(config, self.act, episodes, seed)
        else:
            with self.seeded_predictions(seed):
                traces = play_episodes(config, self.sample_actions, episodes, seed)
        return EvalResult.of(traces.returns, traces.lengths, traces.success_rate)

    def eval_metrics(self, episodes: int, seed: int) -> dict[str, float]:
        """eval/... metrics: return and success, and per track family on KartTrack."""
        metrics: dict[str, float] = {}
        splits: list[str | None] = (
            list(self.config.eval_tracks) if self.config.env.id == KART_ID else [None]
        )
        for split in splits:
            traces = self.play(episodes, seed, split)
            suffix = f"_{split}" if split else ""
            metrics[f"eval/mean_return{suffix}"] = float(traces.returns.mean())
            if traces.success_rate is not None:
                metrics[f"eval/success_rate{suffix}"] = traces.success_rate
            if traces.cross_track_error is not None:
                metrics[f"eval/mean_abs_cte{suffix}"] = float(
                    np.nanmean(np.abs(traces.cross_track_error))
                )
        if self.config.env.id == KART_ID and "eval/success_rate_train" in metrics:
            metrics["eval/success_rate"] = metrics["eval/success_rate_train"]
        return metrics

    def finish_imitation(self, **extra: Any) -> None:
        """Final evaluation (none with final_eval_episodes 0), summary.json and the policy
        file for PPO's init_from."""
        config = self.config
        results: dict[str, Any] = {
            "final_line": NO_FINAL_EVALUATION.format("final_eval_episodes=0")
        }
        if config.final_eval_episodes > 0:
            final = self.evaluate(config.final_eval_episodes)
            metrics = self.eval_metrics(config.final_eval_episodes, config.seed + 3_000_000)
            self.log(
                self.progress_step(),
                labels=self.labels,
                **{f"final/{k.split('/', 1)[1]}": v for k, v in metrics.items()},
            )
            results = {"final_eval": final.to_dict(), "final_metrics": metrics}
        critic = self.prefit_critic() if config.value_prefit_steps > 0 else None
        if config.export_policy:
            Path(config.export_policy).parent.mkdir(parents=True, exist_ok=True)
            save_policy(config.export_policy, self.actor, critic)
        if self.run is not None:
            policy = save_policy(self.run.path / "policy.safetensors", self.actor, critic)
            self.run.write_summary(
                **results,
                labels=self.labels,
                gradient_steps=self.gradient_steps,
                train_seconds=round(self.fit_seconds, 2),
                policy_file=str(policy),
                **extra,
            )

    def prefit_critic(self, epochs: int = 30) -> Critic:
        """A critic fitted (MSE) to Monte-Carlo returns of the cloned policy, for PPO."""
        config = self.config
        observations, returns = discounted_returns(
            config.env,
            lambda obs: self.actor.predict(np.asarray(obs, dtype=np.float32), deterministic=False),
            config.value_prefit_steps,
            config.value_gamma,
            config.seed + 5_000_000,
        )
        critic = Critic(
            self.observation_space,
            config.hidden,
            config.activation,
            normalizer=self.actor.normalizer,
        ).to(self.device)
        if len(returns) == 0:
            return critic
        optimizer = torch.optim.Adam(critic.value.parameters(), lr=1e-3)
        obs = torch.as_tensor(observations, device=self.device)
        targets = torch.as_tensor(returns, dtype=torch.float32, device=self.device)
        loss = torch.zeros(())
        for _ in range(epochs):
            order = torch.randperm(len(obs))
            for start in range(0, len(obs), config.batch_size):
                idx = order[start : start + config.batch_size]
                loss = ((critic(obs[idx]) - targets[idx]) ** 2).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        self.log(
            self.progress_step(),
            **{"value_prefit/loss": float(loss.detach()), "value_prefit/samples": len(returns)},
        )
        return critic
