"""Issue 56, bounds: every count a config can set has an upper bound, every float is finite,
evaluation honours a stop signal, and a network too deep for the native kernels runs on the
reference path.

A hostile or unlucky config (`eval_episodes: 1e30` in a downloaded run's config.yaml,
`group_size=1e30`, `learning_rate=inf`) is refused with one message naming the key, the
value and the valid range, before anything is allocated, looped over or overflowed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import signal
import subprocess
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from payoff.algos import available_algorithms, get_algorithm
from payoff.core.config import from_dict
from payoff.core.errors import ConfigError
from payoff.track.checkpoint import load_state, save_state

ROOT = Path(__file__).resolve().parents[1]


# ---- every key of every algorithm's config ----------------------------------------------
def _leaves(tp: Any) -> set[Any]:
    """The plain types a field's annotation allows (unions, lists and tuples opened)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, list, tuple):
        found: set[Any] = set()
        for arg in typing.get_args(tp):
            if arg is not Ellipsis:
                found |= _leaves(arg)
        return found
    return {tp}


def _is_list(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(arg) for arg in typing.get_args(tp) if arg is not type(None))
    return origin in (list, tuple)


Path_ = tuple[str | int, ...]  # keys, and 0 for the first item of a list of configs


def numeric_keys(cls: type, prefix: Path_ = ()) -> list[tuple[Path_, str, bool]]:
    """(path, 'int' or 'float', whether it holds a list) of every number a config of `cls`
    can set from a file, nested config classes (and lists of them: rewards) included."""
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.metadata.get("python_only"):
            continue
        tp = hints[field.name]
        leaves = _leaves(tp)
        path = (*prefix, field.name)
        for leaf in leaves:
            if isinstance(leaf, type) and dataclasses.is_dataclass(leaf):
                found += numeric_keys(leaf, (*path, 0) if _is_list(tp) else path)
        for kind in (int, float):
            if kind in leaves:
                found.append((path, kind.__name__, _is_list(tp)))
    return found


def nested(path: Path_, value: Any) -> dict[str, Any]:
    """The config mapping that sets `path` to `value`."""
    data: Any = value
    for key in reversed(path):
        data = [data] if isinstance(key, int) else {key: data}
    return typing.cast(dict[str, Any], data)


def dotted(path: Path_) -> str:
    """A path as config messages name it: rewards[0].weight."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}" if text else key
    return text


def config_keys() -> list[tuple[str, Path_, str, bool]]:
    keys = []
    for name in available_algorithms():
        cls = get_algorithm(name).config_class
        keys += [(name, *key) for key in numeric_keys(cls)]
    return keys


KEYS = config_keys()


def test_the_walk_finds_the_keys_of_every_algorithm() -> None:
    """The walk below is not empty by accident: it reaches nested keys and every algorithm."""
    assert len({name for name, *_ in KEYS}) == len(available_algorithms())
    paths = {(name, dotted(path)) for name, path, _, _ in KEYS}
    for expected in [
        ("ppo", "eval_episodes"),
        ("ppo", "env.max_episode_steps"),
        ("ppo", "hidden"),
        ("grpo", "group_size"),
        ("grpo", "prompts_per_step"),
        ("alphazero", "mcts.simulations"),
        ("dqn", "replay.size"),
        ("grpo", "rewards[0].weight"),
    ]:
        assert expected in paths
    assert len(KEYS) > 300


def _refused(name: str, data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        from_dict(get_algorithm(name).config_class, data)
    return str(err.value)


@pytest.mark.parametrize("value", [1e30, 10**30, -(10**30)])
def test_every_count_of_every_config_has_an_upper_bound(value: Any) -> None:
    """Each integer key of each algorithm's config (nested ones too) refuses 1e30 and 10**30
    with a message naming the key and the value: a key added later cannot miss its bound."""
    missed = []
    for name, path, kind, is_list in KEYS:
        if kind != "int":
            continue
        data = nested(path, [value] if is_list else value)
        try:
            from_dict(get_algorithm(name).config_class, data)
        except ConfigError as err:
            key = dotted(path) + ("[0]" if is_list else "")
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            if f"'{key}'" not in str(err) or shown not in str(err):
                missed.append((name, key, str(err)))
        else:
            missed.append((name, dotted(path), "accepted"))
    assert not missed, missed


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_of_every_config_is_finite(value: float) -> None:
    """Each float key of each algorithm's config (learning rates, coefficients, schedules'
    ends) refuses inf and nan, naming the key and the value."""
    missed = []
    for name, path, kind, is_list in KEYS:
        if kind != "float":
            continue
        data = nested(path, [value] if is_list else value)
        try:
            from_dict(get_algorithm(name).config_class, data)
        except ConfigError as err:
            key = dotted(path)
            if f"'{key}" not in str(err) or repr(value) not in str(err):
                missed.append((name, key, str(err)))
        else:
            missed.append((name, dotted(path), "accepted"))
    assert not missed, missed


# ---- the keys the issue names, as a user gives them -------------------------------------
def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize(
    "recipe, override, message",
    [
        (
            "cartpole-ppo",
            "eval_episodes=1e30",
            "'eval_episodes' must be in [1, 100,000], got 1e+30",
        ),
        (
            "cartpole-ppo",
            "final_eval_episodes=1e30",
            "'final_eval_episodes' must be in [0, 100,000], got 1e+30",
        ),
        ("cartpole-ppo", "epochs=1e30", "'epochs' must be in [1, 1,000,000,000], got 1e+30"),
        (
            "cartpole-ppo",
            "env.max_episode_steps=1e30",
            "'env.max_episode_steps' must be <= 1,000,000,000, got 1e+30",
        ),
        ("cartpole-ppo", "total_steps=10**30", "'total_steps' must be"),  # (a string: typed)
        ("cartpole-ppo", "hidden=[64,1e30]", "'hidden[1]' must be in [1, 65,536], got 1e+30"),
        (
            "cartpole-ppo",
            "learning_rate=inf",
            "'learning_rate.start' must be a finite number > 0, got inf",
        ),
        ("cartpole-ppo", "learning_rate=.nan", "'learning_rate.start' must be > 0, got nan"),
        ("cartpole-ppo", "ent_coef=.inf", "'ent_coef' must be a finite number >= 0, got inf"),
        (
            "cartpole-ppo",
            "num_steps=10000000",
            "'num_steps' x 'num_envs' must be at most 100,000,000 (env steps in one rollout), "
            "got 10,000,000 x 64 = 640,000,000",
        ),
        (
            "arithmetic-grpo",
            "prompts_per_step=1e30",
            "'prompts_per_step' must be in [1, 100,000], got 1e+30",
        ),
        ("arithmetic-grpo", "group_size=1e30", "'group_size' must be in [2, 1024], got 1e+30"),
        (
            "arithmetic-grpo",
            "prompts_per_step=10000",
            "'prompts_per_step' x 'group_size' must be at most 65,536 (completions in one "
            "rollout batch), got 10,000 x 8 = 80,000",
        ),
        (
            "arithmetic-grpo",
            "learning_rate=inf",
            "'learning_rate' must be a finite number > 0, got inf",
        ),
        (
            "cartpole-dqn",
            "replay.size=1e30",
            "'replay.size' must be in [1, 100,000,000], got 1e+30",
        ),
        ("cartpole-dqn", "learning_rate=-inf", "'learning_rate.start' must be > 0, got -inf"),
    ],
)
def test_a_named_key_is_refused_with_its_range(
    recipe: str, override: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each is refused before training starts, in one line naming the key, the value and
    the valid range (on 9fb6ff5 the counts were accepted and hung or overflowed later, and
    learning_rate=inf ended in a torch.multinomial traceback)."""
    from payoff.cli import main

    assert main(["train", recipe, override, "--out", str(tmp_path), "--no-media"]) == 2
    assert message in one_error_line(capsys)
    assert not list(tmp_path.iterdir())  # refused before a run folder was made


def test_a_config_made_in_python_meets_the_same_bounds() -> None:
    from payoff.algos.ppo import PPO, PPOConfig

    with pytest.raises(ConfigError, match=r"'eval_episodes' must be in \[1, 100,000\], got 10{30}"):
        PPO(config=PPOConfig(eval_episodes=10**30))
    with pytest.raises(ConfigError, match="'group_size' must be in"):
        get_algorithm("grpo")(group_size=1e30)


def test_a_downloaded_run_asking_for_1e30_episodes_is_refused_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder from elsewhere whose config.yaml says `eval_episodes: 1e30`: --resume
    refuses it with the key's range, instead of hanging while memory grows (9fb6ff5)."""
    from payoff.cli import main

    out = tmp_path / "runs"
    argv = ["train", "cartpole-ppo", "total_steps=64", "num_steps=1", "minibatch_size=64"]
    argv += ["final_eval_episodes=2"]
    assert main([*argv, "--out", str(out), "--no-media"]) == 0
    (run,) = out.iterdir()
    (run / "summary.json").unlink()  # unfinished again: resumable
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["eval_episodes"] = "1e30"  # as a file would spell it (YAML 1.1 reads it as a string)
    text = yaml.safe_dump(config, sort_keys=False).replace("'1e30'", "1e30")
    (run / "config.yaml").write_text(text)
    # the config a run resumes with is its checkpoint's: the file from elsewhere says it there too
    (checkpoint,) = (run / "checkpoints").glob("latest.*")
    tree = load_state(checkpoint)
    tree["state"]["config"]["eval_episodes"] = 1e30
    save_state(checkpoint, tree)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-media"]) == 2
    assert "'eval_episodes' must be in [1, 100,000], got 1e+30" in one_error_line(capsys)


# ---- evaluation stops at a signal ---------------------------------------------------------
def test_an_evaluation_stops_at_its_next_step_once_a_stop_is_requested() -> None:
    """evaluate_policy and evaluate_batched ask between steps whether a stop signal is
    pending (the loop's GracefulInterrupt flag): the 3rd step ends it, not the 100,000th."""
    import numpy as np
    import torch

    from payoff.envs.make import EnvConfig
    from payoff.rollout.evaluate import EvaluationStopped, evaluate_policy, stopped_when
    from payoff.rollout.vector import evaluate_batched

    env = EnvConfig(id="Pendulum-v1", max_episode_steps=10**6)  # episodes that never end
    steps: list[int] = []

    def policy(obs: Any) -> Any:
        steps.append(1)
        return np.zeros(1, np.float32)

    def act(obs: torch.Tensor) -> np.ndarray:
        steps.append(1)
        return np.zeros((len(obs), 1), np.float32)

    for evaluate in (
        lambda: evaluate_policy(env, policy, 1000, seed=0),
        lambda: evaluate_batched(env, act, 3, seed=0),
    ):
        steps.clear()
        with stopped_when(lambda: len(steps) >= 3), pytest.raises(EvaluationStopped):
            evaluate()
        assert len(steps) == 3
    assert evaluate_policy(env, policy, 1, seed=0, step_limit=5).episodes == 1  # no context


@pytest.mark.slow
def test_one_sigterm_stops_a_long_periodic_evaluation(tmp_path: Path) -> None:
    """A periodic evaluation of 2,000 Pendulum episodes without a time limit (100,000 steps
    each, about an hour): one SIGTERM stops it within seconds, with a checkpoint and exit
    143, and the stopped evaluation is not recorded. On 9fb6ff5 the signal only set a flag
    the evaluation never read: still running a minute later."""
    out = tmp_path / "runs"
    argv = [
        *("pendulum-ppo", "total_steps=100000", "num_envs=2", "num_steps=16"),
        *("minibatch_size=32", "epochs=1", "log_every=32", "eval_every=32"),
        *("eval_episodes=2000", "env.max_episode_steps=1000000", "checkpoint_every=100000"),
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "payoff.cli", "train", *argv, "--no-media", "--out", str(out)],
        env={**os.environ, "PAYOFF_PROGRESS": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # the first record is logged just before the evaluation
            metrics = list(out.glob("*/metrics.jsonl"))
            if metrics and metrics[0].read_text().strip():
                break
            time.sleep(0.05)
        time.sleep(2)  # into the evaluation (its 2,000 envs are being made, or stepped)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    (run,) = out.iterdir()
    assert process.returncode == 143, stderr
    assert f"payoff train --resume {run}" in stdout
    assert list(run.glob("checkpoints/latest.*"))
    assert "eval/mean_return" not in (run / "metrics.jsonl").read_text()


# ---- a network deeper than the native kernels take --------------------------------------
def test_the_kernels_layer_limit_is_the_c_source_s() -> None:
    from payoff.accel.native import MAX_LAYERS

    source = (ROOT / "payoff" / "accel" / "_kernels.c").read_text()
    assert re.search(rf"#define MAX_LAYERS {MAX_LAYERS}\b", source)


def test_a_network_deeper_than_the_kernels_take_runs_the_reference_path() -> None:
    """hidden=[8] * 17 (18 Linear layers, the kernels take 16) with accelerate auto: the
    torch reference trains it (9fb6ff5: ValueError 'payoff native kernel: 18 layers (1 to
    16)' from the fused rollout)."""
    from payoff.accel import NativeRolloutSampler
    from payoff.accel.native import MAX_LAYERS, kernels, kernels_for
    from payoff.algos.ppo import PPO

    assert kernels_for(MAX_LAYERS + 1) is None
    assert kernels_for(MAX_LAYERS) is kernels()
    agent = PPO(
        "CartPole-v1",
        hidden=[8] * 17,
        num_envs=4,
        num_steps=16,
        minibatch_size=32,
        total_steps=128,
        eval_every=0,
        final_eval_episodes=1,
    )
    agent.learn()
    assert agent.step >= 128
    assert agent.accelerator is None
    assert not isinstance(agent.rollout_sampler(), NativeRolloutSampler)
    assert len(agent.history) > 0


def test_a_config_made_in_python_takes_a_number_where_a_schedule_goes():
    """DQNConfig(learning_rate=5e-4) once reached setup as a float and failed there with
    "'float' object is not callable"; a recipe's number was always a constant schedule."""
    from payoff.algos.dqn import DQN, DQNConfig
    from payoff.core.schedules import Schedule

    dqn = DQN(config=DQNConfig(learning_rate=5e-4, total_steps=64, learning_starts=32))
    assert dqn.config.learning_rate == Schedule(start=5e-4, end=5e-4)
    dqn.learn(64, progress_bar=False)  # trains past learning_starts: the rate is called
    with pytest.raises(ConfigError, match="learning_rate"):
        DQN(config=DQNConfig(learning_rate=-1.0))
