"""The `device` key of the agents: the CPU path trains bitwise as before, bad or absent
devices are one clear error, saved files hold CPU tensors and load onto the configured
device. Runs on the CPU; the CUDA tests run only where torch sees a GPU."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from payoff.algos.a2c import A2C
from payoff.algos.bc import BC
from payoff.algos.dqn import DQN
from payoff.algos.ppo import PPO
from payoff.algos.qlearning import QLearning
from payoff.core.device import available_devices
from payoff.core.errors import ConfigError
from payoff.models import make_actor, save_policy
from payoff.models.flat import FlatParameters
from payoff.models.policy_file import load_policy
from payoff.rollout.buffers import RolloutStorage
from payoff.rollout.replay import ReplayBuffer
from payoff.track.checkpoint import load_state, save_state

CUDA = torch.cuda.is_available()
ONLY_CPU = available_devices() == ["cpu"]  # here 'auto' is the CPU
PPO_TINY = {
    "env": "CartPole-v1",
    "num_envs": 4,
    "num_steps": 32,
    "minibatch_size": 64,
    "total_steps": 1024,
    "eval_every": 0,
    "final_eval_episodes": 2,
    "hidden": [16, 16],
    "seed": 3,
}
DQN_TINY = {
    "env": "CartPole-v1",
    "total_steps": 1200,
    "learning_starts": 200,
    "train_every": 32,
    "gradient_steps": 4,
    "log_every": 200,
    "eval_every": 0,
    "final_eval_episodes": 2,
    "hidden": [32, 32],
    "seed": 4,
}


def _history(agent) -> list[dict]:
    """What the run logged, without the timing metrics."""
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in agent.history]


def _weights(agent) -> list[torch.Tensor]:
    return list((agent.actor if isinstance(agent, PPO) else agent.q_net).parameters())


# ---- the CPU path is the path it was ----------------------------------------------------
@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "auto",
            marks=pytest.mark.skipif(
                not ONLY_CPU, reason="auto picks an accelerator on this machine"
            ),
        ),
    ],
)
@pytest.mark.parametrize(("algo", "settings"), [(PPO, PPO_TINY), (DQN, DQN_TINY)])
def test_cpu_and_auto_train_bitwise_as_the_default(algo, settings, device):
    default = algo(**settings).learn()
    chosen = algo(**settings, device=device).learn()
    assert chosen.device == torch.device("cpu")
    losses = [r for r in _history(default) if "train/loss" in r or "train/value_loss" in r]
    assert len(losses) >= 3  # the comparison covers several logged losses
    assert _history(chosen) == _history(default)
    for a, b in zip(_weights(default), _weights(chosen), strict=True):
        assert torch.equal(a, b)


def test_the_accelerator_branches_forced_on_the_cpu_give_the_same_numbers():
    # No GPU here: run the copies an accelerator takes (to the device, back to the CPU)
    # with the CPU as the device; they must change nothing but where tensors are.
    ppo = PPO(**PPO_TINY)
    ppo.on_cpu, ppo.runner.device = False, ppo.device
    assert _history(ppo.learn()) == _history(PPO(**PPO_TINY).learn())
    dqn = DQN(**DQN_TINY)
    dqn.on_cpu, dqn.by_hand = False, None
    assert _history(dqn.learn()) == _history(DQN(**DQN_TINY, accelerate=False).learn())


def test_dqn_keeps_its_hand_derived_backward_on_the_cpu():
    assert DQN(**DQN_TINY, device="cpu").by_hand is not None


def test_a2c_and_bc_with_device_cpu_train_as_the_default():
    a2c = {"env": "CartPole-v1", "total_steps": 400, "eval_every": 0, "final_eval_episodes": 2}
    assert _history(A2C(**a2c, device="cpu").learn()) == _history(A2C(**a2c).learn())
    bc = {
        "env": "CartPole-v1",
        "expert": "cartpole",
        "label_budget": 200,
        "epochs": 3,
        "eval_every": 0,
        "final_eval_episodes": 2,
    }
    assert _history(BC(**bc, device="cpu").learn()) == _history(BC(**bc).learn())


# ---- errors -------------------------------------------------------------------------------
def test_unknown_device_names_the_valid_ones():
    with pytest.raises(
        ConfigError, match=r"'device' must be auto, cpu, cuda, cuda:N or mps, got 'gpu'"
    ):
        PPO(env="CartPole-v1", device="gpu")


@pytest.mark.skipif(CUDA, reason="this machine has a GPU")
@pytest.mark.parametrize("algo", [PPO, DQN])
def test_absent_cuda_says_what_torch_sees(algo):
    with pytest.raises(ConfigError, match=r"'cuda' is not available.*torch sees: cpu"):
        algo(env="CartPole-v1", device="cuda")


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_qlearning_is_tabular_and_refuses_an_accelerator(device):
    with pytest.raises(ConfigError, match=r"Q-learning is tabular.*cpu or auto.*" + device):
        QLearning(device=device)


def test_qlearning_accepts_auto():
    QLearning(device="auto", total_episodes=10, eval_every=0, final_eval_episodes=2).learn()


def test_flat_parameters_refuse_weights_on_two_devices():
    on_cpu, on_meta = nn.Linear(2, 2), nn.Linear(2, 2, device="meta")
    with pytest.raises(ValueError, match=r"one device.*\['cpu', 'meta'\].*\.to\(device\) first"):
        FlatParameters([*on_cpu.parameters(), *on_meta.parameters()])


# ---- what moves between devices -----------------------------------------------------------
def test_rollout_storage_and_transition_batches_move_every_field():
    meta = torch.device("meta")
    storage = RolloutStorage.allocate(4, 2, (3,), (), torch.long, info_keys=("cost",))
    moved = storage.to(meta)
    for name in ("obs", "actions", "logprobs", "values", "rewards", "valid", "next_values"):
        before, after = getattr(storage, name), getattr(moved, name)
        assert after.device == meta and after.shape == before.shape and after.dtype == before.dtype
    assert moved.info["cost"].device == meta
    assert storage.obs.device.type == "cpu"  # the runner's copy stays where the envs write it
    buffer = ReplayBuffer(8, (3,))
    buffer.add(np.ones((2, 3)), np.zeros(2), np.ones(2), np.ones((2, 3)), np.zeros(2))
    batch = buffer.latest(2).to(meta)
    assert {t.device for t in vars(batch).values()} == {meta}


# ---- saving and loading -------------------------------------------------------------------
@pytest.mark.parametrize(("algo", "settings"), [(PPO, PPO_TINY), (DQN, DQN_TINY)])
def test_saved_on_cpu_loads_with_device_cpu_and_predicts_numpy(tmp_path, algo, settings):
    agent = algo(**{**settings, "total_steps": 400}).learn()
    path = agent.save(tmp_path / "agent.safetensors")
    loaded = algo.load(path, device="cpu")
    assert loaded.device == torch.device("cpu")
    batch = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    actions, _ = loaded.predict(batch)
    assert isinstance(actions, np.ndarray)
    np.testing.assert_array_equal(actions, agent.act(batch))
    action, _ = loaded.predict(batch[0])
    assert isinstance(action, int)


@pytest.mark.skipif(CUDA, reason="this machine has a GPU")
def test_a_checkpoint_from_a_gpu_run_loads_on_a_cpu_only_machine(tmp_path):
    agent = PPO(**{**PPO_TINY, "total_steps": 256}).learn()
    path = agent.save(tmp_path / "ppo.safetensors")
    payload = load_state(path)
    payload["state"]["config"]["device"] = "cuda"  # as a run with device=cuda saves it
    save_state(path, payload)
    with pytest.warns(RuntimeWarning, match=r"trained on device 'cuda'.*loading it on the CPU"):
        loaded = PPO.load(path)
    assert loaded.device == torch.device("cpu")
    assert loaded.config.device == "cpu"
    obs = np.zeros((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(loaded.act(obs), agent.act(obs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # naming the device: no warning
        assert PPO.load(path, device="cpu").device == torch.device("cpu")
    with pytest.raises(ConfigError, match="torch sees: cpu"):
        PPO.load(path, device="cuda")


def test_saved_files_hold_cpu_tensors_and_load_policy_takes_a_device(tmp_path):
    cartpole = gym.make("CartPole-v1")
    actor = make_actor(cartpole.observation_space, cartpole.action_space, hidden=[8])
    path = save_policy(tmp_path / "policy.safetensors", actor)
    assert {t.device.type for t in load_state(path)["actor"].values()} == {"cpu"}
    loaded, critic = load_policy(path, device="cpu")
    assert critic is None and loaded.device == torch.device("cpu")
    actions = loaded.predict(np.zeros((2, 4), dtype=np.float32))
    assert isinstance(actions, np.ndarray) and actions.shape == (2,)
    with pytest.raises(ConfigError, match="'device' must be"):
        load_policy(path, device="gpu")


# ---- a real GPU, where there is one -------------------------------------------------------
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_ppo_and_dqn_train_on_cuda_save_and_load_on_cpu(tmp_path):
    ppo = PPO(**PPO_TINY, device="cuda").learn()
    assert next(ppo.actor.parameters()).is_cuda and ppo.flat.leaf.is_cuda
    assert ppo.optimizer.exp_avg.is_cuda and ppo.storage.obs.is_cpu
    assert all(np.isfinite(r["train/value_loss"]) for r in ppo.history if "train/value_loss" in r)
    on_cpu = PPO.load(ppo.save(tmp_path / "ppo.safetensors"), device="cpu")
    obs = np.zeros((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(on_cpu.act(obs), ppo.act(obs))
    dqn = DQN(**DQN_TINY, device="cuda").learn()
    assert dqn.by_hand is None and any("train/loss" in r for r in dqn.history)
    action, _ = DQN.load(dqn.save(tmp_path / "dqn.safetensors"), device="cpu").predict(obs[0])
    assert isinstance(action, int)
