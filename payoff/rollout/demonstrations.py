"""Expert demonstrations: record them, save them in Minari's format, load them back.

On disk a dataset is Minari's layout (Farama's standard for offline RL data), so datasets
written here load with `minari.MinariDataset(path / "data")`, and Minari datasets load here:

    <path>/data/metadata.json    dataset_id, env_spec, spaces, total_episodes, total_steps, ...
    <path>/data/main_data.hdf5   one group per episode, "episode_<k>", holding
        observations [T+1, ...]  (the last one is the observation after the final step)
        actions [T, ...], rewards [T], terminations [T], truncations [T], infos/ (unused)

Writing and reading need h5py (`pip install h5py`, or `payoff[imitation]`); payoff writes
the layout itself and does not need the minari package. Observations must be Box arrays and
actions Box or Discrete; Dict/Tuple spaces are not supported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from payoff.core.errors import DataError, EnvError
from payoff.envs.make import EnvConfig, make_env
from payoff.rollout.experts import Expert, check_expert, finite_labels
from payoff.rollout.vector import env_errors, refuse_non_finite

MINARI_VERSION = "0.5.4"  # the Minari release whose layout this writes
EPISODE_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")


@dataclass
class Demonstrations:
    """Flat (state, expert action) pairs plus the episode structure they came from."""

    observations: np.ndarray  # [N, *obs_shape] states the actions were taken in
    actions: np.ndarray  # [N, *act_shape]
    rewards: np.ndarray  # [N]
    episode_starts: np.ndarray  # [E] index of each episode's first step
    final_observations: np.ndarray  # [E, *obs_shape] observation after each episode's end
    terminations: np.ndarray  # [N] bool
    truncations: np.ndarray  # [N] bool
    env_id: str = ""
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_starts)

    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards, self.episode_starts) if len(self) else np.zeros(0)


# ---- recording ---------------------------------------------------------------------------
def _check_shape(environment: gym.Env, obs: Any, env_id: str, when: str) -> None:
    """EnvError when a Box env's observation does not have its space's shape."""
    space = environment.observation_space
    if isinstance(space, gym.spaces.Box) and np.shape(obs) != space.shape:
        raise EnvError(
            f"env {env_id!r} returned an observation of shape {np.shape(obs)} {when}; its "
            f"observation_space is {space}"
        )


def record(
    env: EnvConfig | str,
    expert: Expert,
    *,
    steps: int | None = None,
    episodes: int | None = None,
    seed: int = 0,
) -> Demonstrations:
    """Roll out `expert` until `steps` labels (transitions) or `episodes` episodes are collected.

    With `steps`, the last episode is cut at the budget (marked truncated), so exactly
    `steps` expert labels are used.
    """
    if (steps is None) == (episodes is None):
        raise DataError("record() needs exactly one of steps= or episodes=")
    config = EnvConfig(id=env) if isinstance(env, str) else env
    environment = make_env(config)
    space = environment.observation_space
    check_expert(expert, space, environment.action_space)
    obs_rows: list[np.ndarray] = []
    act_rows: list[np.ndarray] = []
    rewards: list[float] = []
    terms: list[bool] = []
    truncs: list[bool] = []
    starts: list[int] = []
    finals: list[np.ndarray] = []
    try:
        episode = 0
        while (steps is None or len(act_rows) < steps) and (episodes is None or episode < episodes):
            with env_errors(space, config.id, "reset while recording the expert"):
                obs, _ = environment.reset(seed=seed + episode)
            _check_shape(environment, obs, config.id, "from reset")
            starts.append(len(act_rows))
            done = False
            while not done:
                action = finite_labels(expert, np.asarray(expert.act(np.asarray(obs)[None])))[0]
                obs_rows.append(np.asarray(obs))
                act_rows.append(action)
                with env_errors(
                    space,
                    config.id,
                    f"step while recording the expert, after {len(act_rows) - 1:,} steps",
                ):
                    obs, reward, terminated, truncated, _ = environment.step(action)
                    reward = float(reward)
                _check_shape(environment, obs, config.id, "from step")
                refuse_non_finite(
                    obs,
                    reward,
                    config.id,
                    f"while recording the expert, after {len(act_rows):,} steps",
                )
                budget_hit = steps is not None and len(act_rows) >= steps
                rewards.append(reward)
                terms.append(bool(terminated))
                truncs.append(bool(truncated) or (budget_hit and not terminated))
                done = terminated or truncated or budget_hit
            finals.append(np.asarray(obs))
            episode += 1
    finally:
        environment.close()
    return Demonstrations(
        observations=np.stack(obs_rows),
        actions=np.stack(act_rows),
        rewards=np.asarray(rewards, dtype=np.float64),
        episode_starts=np.asarray(starts, dtype=np.int64),
        final_observations=np.stack(finals),
        terminations=np.asarray(terms),
        truncations=np.asarray(truncs),
        env_id=config.id,
        observation_space=environment.observation_space,
        action_space=environment.action_space,
    )


# ---- Minari's layout ---------------------------------------------------------------------
def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise DataError(
            "reading and writing demonstrations (Minari's HDF5 layout) needs h5py: pip install h5py"
        ) from None
    return h5py


def _space_json(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Box):
        return json.dumps(
            {
                "type": "Box",
                "dtype": str(space.dtype),
                "shape": list(space.shape),
                "low": space.low.tolist(),
                "high": space.high.tolist(),
            }
        )
    if isinstance(space, gym.spaces.Discrete):
        return json.dumps(
            {"type": "Discrete", "dtype": "int64", "start": int(space.start), "n": int(space.n)}
        )
    raise DataError(f"demonstrations support Box and Discrete spaces, got {space}")


def _space_from_json(text: str | dict[str, Any], where: str) -> gym.Space:
    data = json.loads(text) if isinstance(text, str) else text
    kind = data.get("type")
    if kind == "Box":
        low = np.asarray(data["low"], dtype=data["dtype"]).reshape(data["shape"])
        high = np.asarray(data["high"], dtype=data["dtype"]).reshape(data["shape"])
        return gym.spaces.Box(low, high, dtype=np.dtype(data["dtype"]))  # type: ignore[arg-type]
    if kind == "Discrete":
        return gym.spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    raise DataError(f"{where}: unsupported space type {kind!r} (payoff reads Box and Discrete)")


def save(
    demos: Demonstrations, path: str | Path, dataset_id: str = "payoff/demonstrations-v0"
) -> Path:
    """Write `demos` as a Minari dataset directory at `path` (which must not exist yet)."""
    h5py = _h5py()
    path = Path(path)
    data = path / "data"
    if (data / "metadata.json").exists():
        raise DataError(f"a dataset already exists at {str(path)!r}; pick a new path")
    if demos.observation_space is None or demos.action_space is None:
        raise DataError("demonstrations need observation_space and action_space to be saved")
    data.mkdir(parents=True, exist_ok=True)
    ends = [*demos.episode_starts[1:], len(demos)]
    tmp = data / "main_data.hdf5.tmp"
    with h5py.File(tmp, "w", track_order=True) as file:
        for k, (start, end) in enumerate(zip(demos.episode_starts, ends, strict=True)):
            group = file.create_group(f"episode_{k}")
            group.attrs["id"] = k
            group.attrs["total_steps"] = int(end - start)
            observations = np.concatenate(
                [demos.observations[start:end], demos.final_observations[k][None]]
            )
            group.create_dataset("observations", data=observations)
            group.create_dataset("actions", data=demos.actions[start:end])
            group.create_dataset("rewards", data=demos.rewards[start:end])
            group.create_dataset("terminations", data=demos.terminations[start:end])
            group.create_dataset("truncations", data=demos.truncations[start:end])
            group.create_group("infos")
    tmp.replace(data / "main_data.hdf5")
    env_spec = None
    if demos.env_id:
        try:
            env_spec = gym.spec(demos.env_id).to_json()
        except Exception:
            env_spec = None
    metadata = {
        "dataset_id": dataset_id,
        "total_episodes": demos.num_episodes,
        "total_steps": len(demos),
        "data_format": "hdf5",
        "jpeg_encoding": False,
        "observation_space": _space_json(demos.observation_space),
        "action_space": _space_json(demos.action_space),
        "env_spec": env_spec,
        "env_id": demos.env_id,  # payoff's own key: the env id without parsing env_spec
        "minari_version": MINARI_VERSION,
        "algorithm_name": "expert rollouts (payoff.rollout.demonstrations.record)",
    }
    if env_spec is None:
        metadata.pop("env_spec")
    (data / "metadata.json").write_text(json.dumps(metadata))
    return path


def load(path: str | Path, env_id: str | None = None) -> Demonstrations:
    """Load a Minari dataset directory (written here or by Minari); checks fields and env id.

    `path` may be the dataset directory or its `data/` folder. With `env_id`, a dataset
    recorded on a different env is an error.
    """
    h5py = _h5py()
    path = Path(path)
    data = path if (path / "metadata.json").exists() else path / "data"
    meta_file = data / "metadata.json"
    if not meta_file.is_file():
        raise DataError(f"{str(path)!r} is not a demonstrations dataset: no data/metadata.json")
    try:
        metadata = json.loads(meta_file.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{str(meta_file)!r} is not valid JSON: {err}") from None
    for key in ("observation_space", "action_space"):
        if key not in metadata:
            raise DataError(f"{str(meta_file)!r} is missing {key!r}")
    if metadata.get("data_format", "hdf5") != "hdf5":
        raise DataError(
            f"{str(path)!r} uses Minari's {metadata['data_format']!r} format; payoff reads 'hdf5' datasets"
        )
    observation_space = _space_from_json(metadata["observation_space"], str(meta_file))
    action_space = _space_from_json(metadata["action_space"], str(meta_file))
    dataset_env = metadata.get("env_id") or _env_id_from_spec(metadata.get("env_spec"))
    if env_id is not None and dataset_env and dataset_env != env_id:
        raise DataError(
            f"demonstrations at {str(path)!r} were recorded on {dataset_env!r}, not {env_id!r}; "
            f"record new ones on {env_id!r} or change env.id"
        )
    main = data / "main_data.hdf5"
    if not main.is_file():
        raise DataError(f"{str(path)!r} has no data/main_data.hdf5")
    pieces, starts = _read_episodes(h5py, main)
    if not starts:
        raise DataError(f"{str(main)!r} holds no episodes")
    demos = Demonstrations(
        observations=np.concatenate(pieces["observations"]),
        actions=np.concatenate(pieces["actions"]),
        rewards=np.concatenate(pieces["rewards"]).astype(np.float64),
        episode_starts=np.asarray(starts, dtype=np.int64),
        final_observations=np.stack(pieces["finals"]),
        terminations=np.concatenate(pieces["terminations"]).astype(bool),
        truncations=np.concatenate(pieces["truncations"]).astype(bool),
        env_id=dataset_env or "",
        observation_space=observation_space,
        action_space=action_space,
    )
    if demos.observations.shape[1:] != observation_space.shape:
        raise DataError(
            f"{str(path)!r}: observations have shape {demos.observations.shape[1:]}, but the "
            f"dataset's observation space is {observation_space}"
        )
    return demos


def _read_episodes(h5py: Any, main: Path) -> tuple[dict[str, list[np.ndarray]], list[int]]:
    """Each episode of a Minari HDF5 file, in order: its fields in lists by name (the last
    observation under 'finals', apart from the others), and the step each episode starts at."""
    pieces: dict[str, list[np.ndarray]] = {k: [] for k in (*EPISODE_FIELDS, "finals")}
    starts, count = [], 0
    with h5py.File(main, "r") as file:
        names = sorted(
            (n for n in file if n.startswith("episode_")), key=lambda n: int(n.split("_")[1])
        )
        for name in names:
            group = file[name]
            missing = [f for f in EPISODE_FIELDS if f not in group]
            if missing:
                raise DataError(
                    f"{str(main)!r}: {name} is missing field(s) {', '.join(missing)}; "
                    f"each episode needs {', '.join(EPISODE_FIELDS)}"
                )
            observations, actions = group["observations"][()], group["actions"][()]
            steps = len(actions)
            if len(observations) != steps + 1:
                raise DataError(
                    f"{str(main)!r}: {name} has {len(observations)} observations for {steps} "
                    f"actions; Minari stores one more observation than actions"
                )
            starts.append(count)
            count += steps
            pieces["observations"].append(observations[:-1])
            pieces["finals"].append(observations[-1])
            pieces["actions"].append(actions)
            for key in ("rewards", "terminations", "truncations"):
                pieces[key].append(group[key][()])
    return pieces, starts


def _env_id_from_spec(spec: Any) -> str:
    if not spec:
        return ""
    try:
        return str(json.loads(spec).get("id", "")) if isinstance(spec, str) else ""
    except json.JSONDecodeError:
        return ""


def check_spaces(
    demos: Demonstrations, obs_space: gym.Space, act_space: gym.Space, env_id: str
) -> None:
    """Raise EnvError when the dataset's spaces differ from the env's."""
    for name, mine, theirs in (
        ("observation", demos.observation_space, obs_space),
        ("action", demos.action_space, act_space),
    ):
        if mine is not None and (mine.shape != theirs.shape or type(mine) is not type(theirs)):
            raise EnvError(
                f"demonstrations have {name} space {mine}, but env {env_id!r} has {theirs}"
            )
