"""The GPU path: language-model trainers (float32 weights under bf16 autocast, and bfloat16
weights), the lean forward, asynchronous generation, the continuous-control agents, behavior
cloning, DAgger and AlphaZero train on a CUDA device, log finite numbers and save CPU tensors
that load on the CPU. Every test here needs a CUDA GPU and is skipped without one; the CPU
path is tested everywhere else."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.alphazero import AlphaZero  # noqa: E402
from payoff.algos.bc import BC  # noqa: E402
from payoff.algos.dagger import DAgger  # noqa: E402
from payoff.algos.dpo import DPO  # noqa: E402
from payoff.algos.grpo import GRPO  # noqa: E402
from payoff.algos.sac import SAC  # noqa: E402
from payoff.algos.sft import SFT  # noqa: E402
from payoff.algos.td3 import TD3  # noqa: E402
from payoff.models.lean_forward import lean_supported, lm_forward  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm, save_lm  # noqa: E402


@pytest.fixture(scope="module")
def fresh_model_dir(tmp_path_factory):
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("fresh") / "model"))


def _digit_share(prompts, completions, **columns):
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def _finite(history: list[dict], key: str) -> list[float]:
    values = [r[key] for r in history if key in r]
    assert values, f"nothing logged under {key}"
    assert all(math.isfinite(v) for v in values), values
    return values


def _grpo(model_dir: str, model: dict, **extra) -> GRPO:
    return GRPO(
        model={"path": model_dir, **model},
        prompts_per_step=4,
        group_size=4,
        max_new_tokens=4,
        steps=3,
        eval_every=3,
        checkpoint_every=10**9,
        final_eval_k=[1],
        task={"eval_size": 8},
        rewards=[_digit_share],
        device="cuda",
        **extra,
    )


@pytest.mark.parametrize(
    "model",
    [{"autocast": True}, {"dtype": "bfloat16"}],
    ids=["float32-weights-bf16-autocast", "bfloat16-weights"],
)
def test_grpo_trains_on_cuda_and_saves_cpu_tensors(fresh_model_dir, model, tmp_path):
    grpo = _grpo(fresh_model_dir, model)
    assert next(grpo.model.parameters()).is_cuda
    before = {n: p.detach().clone() for n, p in grpo.model.named_parameters()}
    grpo.learn()
    _finite(grpo.history, "train/loss")
    _finite(grpo.history, "train/mismatch_kl")
    moved = [n for n, p in grpo.model.named_parameters() if not torch.equal(p, before[n])]
    assert moved, "no weight changed in 3 steps"
    state = grpo.state_dict()
    assert {t.device.type for t in state["model"].values()} == {"cpu"}
    folder = save_lm(grpo.model, grpo.tokenizer, tmp_path / "trained")
    on_cpu, _ = load_lm(ModelConfig(path=str(folder)), seed=0)
    name = moved[0]
    torch.testing.assert_close(
        dict(on_cpu.named_parameters())[name].float(),
        dict(grpo.model.named_parameters())[name].detach().float().cpu(),
    )


def test_async_generation_on_cuda_trains(fresh_model_dir):
    grpo = _grpo(
        fresh_model_dir,
        {"autocast": True},
        async_generation=True,
        max_staleness=1,
        mismatch_correction="token_tis",
    )
    try:
        grpo.learn()
    finally:
        close = getattr(grpo.sampler, "close", None)
        if close is not None:
            close()
    _finite(grpo.history, "train/loss")
    assert grpo.step == 3


@pytest.mark.parametrize("training", [False, True])
def test_lean_forward_matches_transformers_on_cuda(training):
    model, _ = load_lm(ModelConfig(), seed=0)
    model = model.to("cuda").train(training)
    assert lean_supported(model)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 40, (4, 6), generator=generator).cuda()
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        lean, _ = lm_forward(model, ids, mask, positions)
    torch.testing.assert_close(lean, expected, rtol=1e-4, atol=1e-5)


def test_sft_and_dpo_train_on_cuda(fresh_model_dir):
    sft = SFT(
        model={"path": fresh_model_dir, "autocast": True},
        device="cuda",
        steps=3,
        batch_size=8,
        log_every=1,
        eval_every=3,
        task={"eval_size": 8},
    )
    sft.learn()
    losses = _finite(sft.history, "train/loss")
    assert losses[-1] < losses[0]
    assert next(sft.model.parameters()).is_cuda
    dpo = DPO(
        model={"path": fresh_model_dir, "autocast": True},
        device="cuda",
        steps=2,
        batch_size=4,
        log_every=1,
        eval_every=2,
    )
    dpo.learn()
    _finite(dpo.history, "train/loss")


@pytest.mark.parametrize("algo", [SAC, TD3], ids=["sac", "td3"])
def test_continuous_agents_train_on_cuda_and_load_on_cpu(algo, tmp_path):
    agent = algo(
        env="Pendulum-v1",
        hidden=[16, 16],
        learning_starts=64,
        batch_size=32,
        total_steps=400,
        eval_every=0,
        final_eval_episodes=1,
        log_every=100,
        seed=0,
        device="cuda",
    ).learn()
    assert next(agent.actor.parameters()).is_cuda
    assert any(math.isfinite(r.get("train/critic_loss", math.nan)) for r in agent.history)
    on_cpu = algo.load(agent.save(tmp_path / "agent.safetensors"), device="cpu")
    obs = np.zeros(3, dtype=np.float32)
    action, _ = agent.predict(obs)
    np.testing.assert_allclose(on_cpu.act(obs), action, rtol=1e-5, atol=1e-6)


IMITATION = {
    "env": "CartPole-v1",
    "expert": "cartpole",
    "hidden": [32, 32],
    "label_budget": 300,
    "final_eval_episodes": 2,
    "seed": 0,
}


def test_behavior_cloning_on_cuda_fits_like_the_cpu_and_loads_there(tmp_path):
    # The demonstrations and the minibatch order come from the CPU, so the CUDA run
    # fits the same data in the same order: its losses match the CPU's to float32 noise.
    settings = {**IMITATION, "epochs": 5, "eval_every": 0}
    on_cuda = BC(**settings, device="cuda").learn()
    on_cpu = BC(**settings, device="cpu").learn()
    assert next(on_cuda.actor.parameters()).is_cuda
    np.testing.assert_allclose(
        _finite(on_cuda.history, "train/loss"), _finite(on_cpu.history, "train/loss"), rtol=1e-3
    )
    loaded = BC.load(on_cuda.save(tmp_path / "bc.safetensors"), device="cpu")
    obs = on_cuda.data_obs[:64]
    np.testing.assert_array_equal(loaded.act(obs), on_cuda.act(obs))


def test_dagger_rounds_run_on_cuda_and_load_on_cpu(tmp_path):
    agent = DAgger(**IMITATION, rounds=3, epochs_per_round=3, device="cuda").learn()
    assert next(agent.actor.parameters()).is_cuda
    assert [r["labels"] for r in agent.rounds_log] == [100, 200, 300]
    _finite(agent.history, "train/loss")
    loaded = DAgger.load(agent.save(tmp_path / "dagger.safetensors"), device="cpu")
    obs = agent.data_obs[:64]
    np.testing.assert_array_equal(loaded.act(obs), agent.act(obs))


@pytest.mark.parametrize("workers", [1, 2], ids=["searches-on-cuda", "cpu-worker-copies"])
def test_alphazero_trains_on_cuda_and_loads_on_cpu(workers, tmp_path):
    # workers 1: self-play's leaf batches go to the GPU; workers 2: the worker processes
    # play with CPU copies of the weights, and the network trains on the GPU.
    agent = AlphaZero(
        game="tictactoe",
        iterations=2,
        games_per_iteration=8,
        train_steps=5,
        batch_size=32,
        gate_games=2,
        gate_simulations=4,
        eval_every=1,
        eval_games=2,
        eval_simulations=4,
        baselines=["random"],
        final_eval_games=2,
        mcts={"simulations": 8},
        workers=workers,
        seed=0,
        device="cuda",
    ).learn()
    assert next(agent.net.parameters()).is_cuda
    _finite(agent.history, "train/policy_loss")
    _finite(agent.history, "train/value_loss")
    loaded = AlphaZero.load(agent.save(tmp_path / "alphazero.safetensors"), device="cpu")
    assert next(loaded.net.parameters()).device.type == "cpu"
    start = agent.game.initial_state()
    move, _ = loaded.predict(start)
    assert move == agent.act(start)


class _TwoChoices(gym.Env):
    """MultiDiscrete actions with a start: choice 0 in -1..1, choice 1 in 0..1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2], start=[-1, 0])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        self.t += 1
        return np.zeros(2, np.float32), float(action[0] == 1), False, self.t >= 10, {}


def test_multidiscrete_ppo_on_cuda_acts_in_the_env_values_and_loads_on_cpu(tmp_path):
    from payoff import PPO

    agent = PPO(
        env=_TwoChoices(), total_steps=512, eval_every=0, final_eval_episodes=1, device="cuda"
    ).learn()
    assert next(agent.actor.parameters()).is_cuda
    obs = np.zeros((3, 2), np.float32)
    actions, _ = agent.predict(obs)
    assert all(agent.action_space.contains(a) for a in actions)
    on_cpu = PPO.load(agent.save(tmp_path / "ppo.safetensors"), env=_TwoChoices(), device="cpu")
    np.testing.assert_array_equal(on_cpu.act(obs), actions)
