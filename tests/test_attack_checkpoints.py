"""Crafted checkpoint files: a pickle payload never runs, malformed files give one clear error.

Every file payoff loads from a run (checkpoints, `save` files, policy files for `init_from`
and experts) is safetensors + JSON, read without unpickling. The payload here would create a
marker file if anything unpickled it; each way in (CLI eval / play / report / --resume,
`Algorithm.load`, `load_policy`, `init_from`, file experts) must refuse it with a
CheckpointError and leave no marker.
"""

import json
import math
import os
import pathlib
import pickle
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import save as safetensors_save

from payoff.algos.dqn import DQN
from payoff.algos.ppo import PPO
from payoff.algos.qlearning import QLearning
from payoff.cli import main
from payoff.core.errors import CheckpointError
from payoff.models.mlp import make_actor
from payoff.models.policy_file import load_policy, save_policy
from payoff.rollout.experts import PolicyExpert, make_expert
from payoff.track.checkpoint import FORMAT_KEY, STATE_FORMAT, TREE_KEY, load_state, save_state
from payoff.track.run import Run, load_checkpoint_file

SHORT = [
    "total_episodes=300",
    "eval_every=100",
    "eval_episodes=10",
    "final_eval_episodes=10",
    "checkpoint_every=100",
]
TINY_PPO = {"num_envs": 4, "num_steps": 16, "minibatch_size": 32, "hidden": [8, 8]}


class Payload:
    """Unpickling this creates `marker` (no shell needed)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def craft(path: Path, marker: Path, kind: str = "torch") -> Path:
    """A checkpoint-shaped pickle whose loading would run code."""
    payload = {"format": 1, "algo": "qlearning", "elapsed": 0.0, "state": Payload(marker)}
    if kind == "torch":
        torch.save(payload, path)  # zip archive, like payoff 0.1's latest.pt
    else:
        path.write_bytes(pickle.dumps(payload, protocol=4))
    return path


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    assert (
        main(["train", "frozenlake-q", *SHORT, "--seed", "1", "--out", str(out), "--no-media"]) == 0
    )
    return next(out.iterdir())


@pytest.fixture
def hostile_run(trained_run, tmp_path) -> tuple[Path, Path]:
    """A copy of a real, unfinished run whose latest checkpoint is the payload."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "summary.json").unlink(missing_ok=True)  # unfinished: --resume reads the checkpoint
    marker = tmp_path / "PWNED"
    craft(run / "checkpoints" / "latest.safetensors", marker)
    return run, marker


def test_the_payload_is_live(tmp_path):
    """Sanity: the crafted files do run code when unpickled (so refusing them matters)."""
    marker = tmp_path / "marker"
    torch.load(craft(tmp_path / "a.pt", marker), weights_only=False)
    assert marker.exists()
    marker.unlink()
    pickle.loads(craft(tmp_path / "b.pkl", marker, kind="pickle").read_bytes())
    assert marker.exists()


# ---- the command line ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["eval", "{run}", "--episodes", "2"],
        ["play", "{run}", "--gif", "{tmp}/x.gif"],
        ["report", "{run}"],
        ["train", "--resume", "{run}"],
    ],
    ids=["eval", "play", "report", "resume"],
)
def test_cli_refuses_a_pickle_checkpoint(hostile_run, tmp_path, command):
    # report refuses the checkpoint too, and still writes the page from the metrics alone
    run, marker = hostile_run
    argv = [part.format(run=run, tmp=tmp_path) for part in command]
    env = {**os.environ, "PAYOFF_PROGRESS": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "payoff.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = command[0] == "report"
    assert done.returncode == (0 if report else 2), done.stderr
    err = done.stderr.strip()
    said = "payoff: " if report else "error: "
    assert err.startswith(said) and "\n" not in err and "Traceback" not in err, err
    assert "latest.safetensors" in err and "pickle" in err and "no longer loads" in err
    assert not report or "the report shows the metrics only" in err
    assert not marker.exists()


def test_cli_refuses_a_legacy_latest_pt(hostile_run, capsys):
    """A run from payoff 0.1 has only checkpoints/latest.pt: that file is named and refused."""
    run, marker = hostile_run
    (run / "checkpoints" / "latest.safetensors").rename(run / "checkpoints" / "latest.pt")
    for argv in (["eval", str(run)], ["train", "--resume", str(run)], ["report", str(run)]):
        assert main(argv) == (0 if argv[0] == "report" else 2)  # report: the metrics only
        err = capsys.readouterr().err.strip()
        assert "latest.pt" in err and "pickle" in err and "\n" not in err, err
    assert not marker.exists()


# ---- the Python API ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["torch", "pickle"])
def test_algorithm_load_refuses_pickles(tmp_path, kind):
    marker = tmp_path / "PWNED"
    path = craft(tmp_path / "agent.safetensors", marker, kind)
    with pytest.raises(CheckpointError, match="pickle.*no longer loads pickles") as info:
        QLearning.load(path)
    assert str(path) in str(info.value)
    for load in (PPO.load, lambda p: load_checkpoint_file(p, None), load_policy):
        with pytest.raises(CheckpointError, match="pickle"):
            load(path)
    assert not marker.exists()


def test_policy_files_experts_and_init_from_refuse_pickles(tmp_path):
    marker = tmp_path / "PWNED"
    path = craft(tmp_path / "policy.safetensors", marker)
    with pytest.raises(CheckpointError, match="policy file .*pickle"):
        load_policy(path)
    with pytest.raises(CheckpointError, match="pickle"):
        PolicyExpert.load(path)
    with pytest.raises(CheckpointError, match="pickle"):
        make_expert(str(path))
    with pytest.raises(CheckpointError, match="init_from file .*pickle"):
        PPO(env="CartPole-v1", init_from=str(path), **TINY_PPO)
    assert not marker.exists()


def test_policy_file_round_trip_and_init_from(tmp_path):
    env = gym.make("CartPole-v1")
    actor = make_actor(env.observation_space, env.action_space, hidden=(8, 8), normalize_obs=True)
    path = save_policy(tmp_path / "bc.safetensors", actor)
    again, critic = load_policy(path)
    assert critic is None and repr(again.observation_space) == repr(env.observation_space)
    for key, value in actor.state_dict().items():
        assert torch.equal(value, again.state_dict()[key])
    agent = PPO(env="CartPole-v1", init_from=str(path), **TINY_PPO)
    assert torch.equal(agent.actor.state_dict()["logits.0.weight"], actor.logits[0].weight)
    obs = np.zeros((3, 4), dtype=np.float32)
    assert np.array_equal(PolicyExpert.load(path).act(obs), actor.predict(obs, deterministic=True))


# ---- malformed files -----------------------------------------------------------------------
def write_tree(path: Path, tree_json: str, tensors: dict | None = None, **extra: str) -> Path:
    metadata = {FORMAT_KEY: STATE_FORMAT, TREE_KEY: tree_json, **extra}
    path.write_bytes(safetensors_save(tensors or {"x": torch.zeros(2)}, metadata=metadata))
    return path


@pytest.mark.parametrize(
    "tree, message",
    [
        ('{"algo": 5, "state": {}}', "names no algorithm"),
        ('{"algo": "qlearning", "state": [1, 2]}', "holds no state"),
        ('{"algo": "qlearning", "state": {"~": "pickle", "data": "gASV"}}', "unknown tag 'pickle'"),
        ('{"algo": "qlearning", "state": {"~": "tuple"}}', "tag 'tuple' without a list 'items'"),
        (
            '{"algo": "qlearning", "state": {"~": "tensor", "key": "nope"}}',
            "no tensor named 'nope'",
        ),
        ('{"algo": "qlearning", "state": {"~": "int", "value": "1e9"}}', "not a decimal number"),
        ('{"algo": "qlearning", "state": {"~": "float", "value": "1.5"}}', "float tag"),
        ('{"algo": "qlearning", "state": {"~": "bytes", "base64": "!!"}}', "not base64"),
        ('{"algo": "qlearning", "elapsed": NaN, "state": {}}', "not valid JSON"),
        ('{"algo": "qlearning", "state": {"a": ', "not valid JSON"),
        ("[" * 5000 + "]" * 5000, "not valid JSON|deeper"),
        (
            '{"algo": "q", "state": {"~": "ndarray", "key": "x", "dtype": "<f8", "shape": [9]}}',
            "raw array bytes|bytes for a",
        ),
        (
            '{"algo": "q", "state": {"~": "ndarray", "key": "x", "dtype": "|O", "shape": [1]}}',
            "not plain data",
        ),
        (
            '{"algo": "q", "state": {"~": "ndarray", "key": "x", "dtype": "<f3", "shape": [1]}}',
            "NumPy has no dtype",
        ),
        (
            '{"algo": "q", "state": [{"~": "tensor", "key": "x"}, {"~": "tensor", "key": "x"}]}',
            "used twice",
        ),
        (
            '{"algo": "q", "state": {"~": "dict", "items": [[[1], 2]]}}',
            "unhashable dict key",
        ),
        (  # ints k * (2**61 - 1) all hash to 0: 40,000 of them took 13 s to load
            '{"algo": "q", "state": {"~": "dict", "items": ['
            + ", ".join(f"[{k * (2**61 - 1)}, 0]" for k in range(1, 41))
            + "]}}",
            "keys made to collide",
        ),
    ],
)
def test_malformed_headers_are_one_clear_error(tmp_path, tree, message):
    path = write_tree(tmp_path / "bad.safetensors", tree)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint_file(path, None)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_other_files_are_refused(tmp_path):
    good = save_state(tmp_path / "good.safetensors", {"algo": "x", "state": {"w": torch.ones(64)}})
    data = good.read_bytes()
    cases = {
        "truncated": data[: len(data) - 10],
        "header cut": data[:20],
        "empty": b"",
        "text": b"hello, I am not a checkpoint",
        "bad header length": (10**12).to_bytes(8, "little") + data[8:],
        "hf model": safetensors_save({"w": torch.ones(2)}, metadata={"format": "pt"}),
        "other format": safetensors_save({"w": torch.ones(2)}, metadata={FORMAT_KEY: "x/9"}),
    }
    expected = {
        "truncated": "corrupt or truncated",
        "header cut": "corrupt or truncated",
        "empty": "is empty",
        "text": "corrupt or not a payoff checkpoint",
        "bad header length": "corrupt or truncated",
        "hf model": "safetensors file but not a payoff checkpoint",
        "other format": "its format is 'x/9', expected 'payoff-state/1'",
    }
    for name, content in cases.items():
        path = tmp_path / f"{name.replace(' ', '-')}.safetensors"
        path.write_bytes(content)
        with pytest.raises(CheckpointError, match=expected[name]):
            load_checkpoint_file(path, None)
    with pytest.raises(CheckpointError, match="no file .* to load: give a file written by save"):
        load_checkpoint_file(tmp_path / "missing.safetensors", None)
    with pytest.raises(CheckpointError, match="no checkpoint at .* before its first checkpoint"):
        load_checkpoint_file(tmp_path / "checkpoints" / "latest.safetensors", None)


def test_wrong_algorithm_missing_config_and_wrong_state(tmp_path, capsys):
    agent = QLearning(env="FrozenLake-v1", total_episodes=10, eval_every=5)
    path = agent.save(tmp_path / "q.safetensors")
    with pytest.raises(
        CheckpointError, match=r"holds a 'qlearning' agent, not 'dqn': .*payoff.QLearning.load"
    ):
        DQN.load(path)
    save_state(tmp_path / "other.safetensors", {"algo": "sarsa9", "state": {}, "format": 2})
    with pytest.raises(CheckpointError, match="version that has the algorithm 'sarsa9'"):
        DQN.load(tmp_path / "other.safetensors")
    save_state(tmp_path / "noconfig.safetensors", {"algo": "qlearning", "state": {"state": {}}})
    with pytest.raises(CheckpointError, match="holds no qlearning config") as info:
        QLearning.load(tmp_path / "noconfig.safetensors")
    assert "noconfig.safetensors" in str(info.value)
    tree = load_state(path)
    tree["state"]["state"]["q"] = "not a table"
    save_state(tmp_path / "wrong.safetensors", tree)
    with pytest.raises(CheckpointError, match="its state does not fit this qlearning model"):
        QLearning.load(tmp_path / "wrong.safetensors")
    # the same through the CLI: a run whose checkpoint has no config
    run = Run.create(tmp_path / "runs", "q", {"algo": "qlearning", "env": {"id": "FrozenLake-v1"}})
    run.save_checkpoint({"state": {}}, algo="qlearning")
    assert main(["eval", str(run.path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no qlearning config" in err and "\n" not in err


# ---- the tree codec ------------------------------------------------------------------------
def test_tree_round_trips_exactly(tmp_path):
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    base = torch.arange(12.0)
    adam = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))])
    adam.param_groups[0]["params"][0].grad = torch.ones(3)
    adam.step()
    tree = {
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
        "pcg64": np.random.default_rng(7).bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "optimizer": adam.state_dict(),  # int keys, tuples, 0-d tensors
        3: "an int key",
        (1, "a"): "a tuple key",
        None: [None, True, False],
        "big": [2**64 + 1, -(2**200), 2**53, 2**53 - 1],
        "floats": [math.inf, -math.inf, -0.0, 1e-308, 0.1],
        "bytes": b"\x00\x80\xff",
        "empty": torch.zeros(0, 3),
        "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "view": base[3:6],
        "shared": base.view(3, 4),
        "transposed": base.view(3, 4).t(),
        "uint64": np.array([2**64 - 1, 0], dtype=np.uint64),
        "uint32": np.arange(3, dtype=np.uint32),
        "complex128": np.array([1 + 2j]),
        "strings": np.array(["ab", "c"]),
        "np_scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), np.uint64(2**63)],
        "~": "a key that looks like a tag",
        "nested": [(1, [2, {"a": (3,)}]), []],
        "empty_containers": [{}, (), [], ""],
    }
    path = save_state(tmp_path / "tree.safetensors", tree)
    back = load_state(path)
    assert set(back) == set(tree)

    def same(a, b):
        assert type(a) is type(b) or (isinstance(a, dict) and isinstance(b, dict)), (a, b)
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        elif isinstance(a, np.ndarray | np.generic):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        elif isinstance(a, dict):
            assert list(a) == list(b)
            for key in a:
                same(a[key], b[key])
        elif isinstance(a, list | tuple):
            assert len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                same(x, y)
        elif isinstance(a, float):
            assert math.copysign(1, a) == math.copysign(1, b) and a == b
        else:
            assert a == b

    same(tree, back)
    assert math.isnan(load_state(save_state(tmp_path / "nan.safetensors", [math.nan]))[0])
    # the RNG states continue the same streams
    random.setstate(back["python_rng"])
    np.random.set_state(back["numpy_rng"])
    torch.set_rng_state(back["torch_rng"])
    generator = np.random.default_rng()
    generator.bit_generator.state = back["pcg64"]
    restored = (random.random(), np.random.rand(), torch.rand(1).item(), generator.random())
    random.setstate(tree["python_rng"])
    np.random.set_state(tree["numpy_rng"])
    torch.set_rng_state(tree["torch_rng"])
    generator.bit_generator.state = tree["pcg64"]
    assert restored == (random.random(), np.random.rand(), torch.rand(1).item(), generator.random())
    # the file is plain safetensors: the tensors are there by name, the rest is JSON
    metadata = json.loads(__import__("safetensors").safe_open(str(path), "pt").metadata()[TREE_KEY])
    assert metadata["~"] == "dict"


def test_objects_are_refused_on_save(tmp_path):
    with pytest.raises(CheckpointError, match=r"cannot save a/0: a .*Payload is not data"):
        save_state(tmp_path / "x.safetensors", {"a": [Payload(tmp_path / "m")]})
    with pytest.raises(CheckpointError, match="not plain data"):
        save_state(tmp_path / "x.safetensors", {"a": np.array([object()])})
    assert not (tmp_path / "x.safetensors").exists()


# ---- env state: exact resume without pickling the env ---------------------------------------
def _train_metrics(history):
    return [
        {k: v for k, v in r.items() if k.startswith("train/")}
        for r in history
        if "train/entropy" in r or "train/loss" in r
    ]


def test_classic_control_resume_is_exact_with_env_state_as_data(tmp_path):
    """Gymnasium's own CartPole in a SyncVectorEnv (not payoff's batched one), stopped mid-episode."""
    config = {**TINY_PPO, "vectorization": "sync", "eval_every": 0, "final_eval_episodes": 1}
    straight = PPO(env="CartPole-v1", seed=4, total_steps=768, **config).learn()
    first = PPO(env="CartPole-v1", seed=4, total_steps=768, **config).learn(total=384)
    assert isinstance(first.runner.envs, gym.vector.SyncVectorEnv)
    state = first.runner.state_dict()
    assert state["envs"][0] == "gymnasium" and state["envs_note"] is None
    assert first.runner.episode_length.any(), "the test should stop in the middle of episodes"
    path = first.save(tmp_path / "half.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an exact resume does not warn
        resumed = PPO.load(path)
    resumed.learn()  # the rest of total_steps
    expected = _train_metrics(straight.history)
    got = _train_metrics(first.history) + _train_metrics(resumed.history)
    assert len(expected) == len(got) > 2
    assert got == expected


class OpaqueEnv(gym.Env):
    """An env holding an object that is not data (as Box2D's world is)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.engine = Payload(Path("/nonexistent"))  # stands for a Box2D world
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, 1.0, self.t >= 20, False, {}


def test_an_env_that_cannot_be_saved_resumes_at_an_episode_boundary_and_says_so(tmp_path):
    if "payoff-test/Opaque-v0" not in gym.registry:
        gym.register("payoff-test/Opaque-v0", entry_point=OpaqueEnv)
    config = {**TINY_PPO, "eval_every": 0, "final_eval_episodes": 1, "checkpoint_every": 64}
    run = Run.create(tmp_path, "opaque", {"algo": "ppo"})
    agent = PPO(env="payoff-test/Opaque-v0", seed=0, total_steps=256, **config)
    agent.run = run
    agent.learn(total=128)
    agent.checkpoint()
    state = agent.runner.state_dict()
    assert state["envs"] is None and "OpaqueEnv.engine" in state["envs_note"]
    with pytest.warns(RuntimeWarning, match="OpaqueEnv.engine .*not exactly an uninterrupted run"):
        resumed = PPO.from_run(run)
    events = [e["event"] for e in run.events()]
    assert any(
        e["kind"] == "resume_not_exact" and "OpaqueEnv.engine" in e["message"] for e in events
    )
    resumed.learn()  # and it goes on from fresh episodes
    assert resumed.step >= 256
    # a plain load is not a resume: nothing to say until training goes on from it
    agent.save(tmp_path / "opaque.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = PPO.load(tmp_path / "opaque.safetensors")
        loaded.predict(loaded.runner.obs)
    with pytest.warns(RuntimeWarning, match="not exactly an uninterrupted run"):
        loaded.learn(64)


def test_messages_between_processes_are_data_only():
    """The sampling process's pipe carries checkpoint trees as bytes: a message round-trips,
    and a pickle (or any bytes that are not a payoff tree) is refused without running."""
    from payoff.core.errors import CheckpointError
    from payoff.track.checkpoint import dumps_state, loads_state

    message = (3, True, ({"ids": torch.arange(4), "texts": ["1", "2"]}, torch.zeros(2)))
    back = loads_state(dumps_state(message))
    assert back[:2] == (3, True) and torch.equal(back[2][0]["ids"], torch.arange(4))
    assert back[2][0]["texts"] == ["1", "2"] and torch.equal(back[2][1], torch.zeros(2))

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    for hostile in (pickle.dumps(Boom()), b"", b"\x00" * 16, safetensors_save({})):
        with pytest.raises(CheckpointError, match="message"):
            loads_state(hostile, "message")


# ---- files that declare more network than they hold ----------------------------------------
def test_a_policy_file_declaring_huge_layers_is_refused_before_they_are_made(tmp_path):
    """728 bytes declaring 4 hidden layers of 12,000 made 3.6 GB of layers (234 s) before the
    load noticed there were no weights for them."""
    payload = {
        "format": "payoff-policy/2",
        "spec": {
            "hidden": [12_000] * 4,
            "activation": "tanh",
            "normalize_obs": False,
            "log_std_init": 0.0,
            "observation_space": {
                "type": "Box",
                "low": np.zeros(4, np.float32),
                "high": np.ones(4, np.float32),
                "dtype": "float32",
            },
            "action_space": {"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"},
        },
        "actor": {},
        "critic": None,
    }
    save_state(tmp_path / "bomb.safetensors", payload)
    with pytest.raises(CheckpointError, match=r"declares an MLP .* 432,\d{3},\d{3} weights"):
        load_policy(tmp_path / "bomb.safetensors")
    # an honest file loads as before
    actor = make_actor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden=[8])
    load_policy(save_policy(tmp_path / "honest.safetensors", actor))


def test_a_copied_checkpoint_whose_config_outgrows_its_weights_is_refused(tmp_path):
    agent = PPO(env="CartPole-v1", total_steps=128, num_envs=2, num_steps=64, hidden=[8])
    saved = agent.save(tmp_path / "ppo.safetensors")
    tree = load_state(saved)
    tree["state"]["config"]["hidden"] = [20_000, 20_000, 20_000]
    save_state(tmp_path / "grown.safetensors", tree)  # a file payoff did not write as it is
    with pytest.raises(CheckpointError, match="declares an MLP of widths"):
        PPO.load(tmp_path / "grown.safetensors")
    action, _ = PPO.load(saved).predict(np.zeros(4, np.float32))
    assert action in (0, 1)


def test_init_from_takes_a_run_folder(tmp_path):
    """PPO.load and expert= took a run folder; init_from said 'no init_from file'."""
    run = Run.create(tmp_path / "runs", "ppo", {"algo": "ppo"})
    first = PPO(env="CartPole-v1", run=run, total_steps=128, **TINY_PPO).learn()
    again = PPO(env="CartPole-v1", init_from=str(run.path), **TINY_PPO)
    for key, value in first.actor.state_dict().items():
        assert torch.equal(value, again.actor.state_dict()[key])


def test_a_file_cut_to_a_few_bytes_is_called_truncated_not_a_pickle(tmp_path):
    # the safetensors header length 16,000 starts with byte 0x80, a pickle's first byte
    path = tmp_path / "cut.safetensors"
    path.write_bytes((16_000).to_bytes(8, "little")[:7])
    with pytest.raises(CheckpointError, match="is 7 bytes long, cut short of any checkpoint"):
        QLearning.load(path)


def test_a_checkpoint_cannot_ask_for_endless_threads_envs_or_rollouts(tmp_path):
    """Sizes in a file are checked before anything is allocated: 100,000 torch threads
    crashed the process inside OpenMP, and a billion envs or steps grew until the OS
    killed it."""
    agent = PPO(env="CartPole-v1", num_envs=2, num_steps=8, minibatch_size=8, total_steps=16)
    path = agent.save(tmp_path / "ppo.safetensors")
    for key, value, message in (
        ("threads", 100_000, r"'threads' must be in \[1, 1024\], got 100000"),
        ("num_envs", 10**9, r"'num_envs' must be in \[1, 100,000\], got 1000000000"),
        ("num_steps", 10**9, r"'num_steps' x 'num_envs' must be at most 100,000,000"),
    ):
        tree = load_state(path)
        tree["state"]["config"][key] = value
        save_state(tmp_path / f"{key}.safetensors", tree)
        with pytest.raises(Exception, match=message):
            PPO.load(tmp_path / f"{key}.safetensors")


def test_weights_of_another_dtype_are_refused(tmp_path):
    """load_state_dict would cast int64 weights silently (the policy then plays at random)."""
    agent = PPO(env="CartPole-v1", num_envs=2, num_steps=8, minibatch_size=8, total_steps=16)
    path = agent.save(tmp_path / "ppo.safetensors")
    tree = load_state(path)
    actor = tree["state"]["state"]["actor"]
    actor["logits.0.weight"] = actor["logits.0.weight"].to(torch.int64)
    save_state(tmp_path / "int.safetensors", tree)
    with pytest.raises(
        CheckpointError, match=r"actor.logits.0.weight is torch.int64, .*torch.float32"
    ):
        PPO.load(tmp_path / "int.safetensors")


@pytest.mark.parametrize(
    "line",
    [
        b'{"step": 1, "event": "x"}',
        b'{"step": 1, "event": null}',
        b'{"step": 1, "event": {"kind": "k", "severity": "critical", "evidence": "x"}}',
        b'{"event": {"kind": "k"}}',
        b"\xff\xfe\x00not utf-8",
    ],
)
def test_report_skips_malformed_event_lines_and_bytes(trained_run, tmp_path, line, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    with (run / "metrics.jsonl").open("ab") as file:
        file.write(line + b"\n")
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    assert (run / "media" / "report.html").is_file()
