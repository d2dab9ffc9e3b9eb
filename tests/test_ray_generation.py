"""LLM generation on Ray: GRPO with one worker equals local, killed workers, shards, config errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")
ray = pytest.importorskip("ray")

from payoff.algos.grpo import GRPO  # noqa: E402
from payoff.core.errors import ConfigError  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm, save_lm  # noqa: E402
from payoff.rollout.generation import SamplingConfig  # noqa: E402
from payoff.rollout.ray_generation import RaySampler  # noqa: E402
from payoff.rollout.ray_pool import RayConfig  # noqa: E402


def digit_share(prompts, completions, **kwargs):
    """Share of digits in the completion: a reward an untrained model gets signal from."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


@pytest.fixture(autouse=True)
def _ray(ray_cluster):
    """Every test here runs on the session's local Ray instance (tests/conftest.py)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """An untrained tiny model in HF format (no pretraining, nothing downloaded)."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("fresh") / "model"))


def _settings(model_dir: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": {"path": model_dir},
        "rewards": [{"name": f"{__file__}:digit_share"}],
        "steps": 3,
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 4,
        "learning_rate": 1e-3,
        "final_eval_k": [1],
        "task": {"eval_size": 8},
        **extra,
    }


def _learning_metrics(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Everything but wall-clock and Ray bookkeeping."""
    return [
        {k: v for k, v in row.items() if k != "time" and not k.startswith(("perf/", "ray/"))}
        for row in history
    ]


@pytest.fixture(scope="module")
def local_history(model_dir: str) -> list[dict[str, Any]]:
    return GRPO(**_settings(model_dir)).learn().history


class KillWorkerAt:
    """A monitor (fed every logged record) that kills generation worker 0 after `step`."""

    def __init__(self, algo: GRPO, step: int):
        self.algo, self.step = algo, step

    def update(self, step: int, record: dict[str, Any]) -> list[Any]:
        if step == self.step and "train/loss" in record:
            ray.kill(self.algo.sampler.workers[0], no_restart=True)  # type: ignore[union-attr]
        return []


def test_one_ray_worker_reproduces_local_grpo(model_dir, local_history):
    algo = GRPO(**_settings(model_dir, backend="ray", ray={"num_workers": 1}))
    algo.learn()
    assert isinstance(algo.sampler, RaySampler) and not algo.sampler.workers  # closed at the end
    train = [r for r in algo.history if "train/loss" in r]
    assert len(train) == 3 and train[-1]["ray/weight_broadcasts"] == 3.0
    assert any(r["train/grad_norm"] > 0 for r in train)  # the weights did move between steps
    assert _learning_metrics(algo.history) == _learning_metrics(local_history)


def test_killed_worker_is_restarted_and_its_shard_regenerated(model_dir, local_history):
    algo = GRPO(**_settings(model_dir, backend="ray", ray={"num_workers": 1}))
    algo.attach_monitors([KillWorkerAt(algo, step=1)])  # type: ignore[list-item]
    algo.learn()
    train = [r for r in algo.history if "train/loss" in r]
    assert [r["ray/worker_restarts"] for r in train] == [0.0, 1.0, 1.0]
    # The replacement regenerates the lost shard with the same weights and RNG stream.
    assert _learning_metrics(algo.history) == _learning_metrics(local_history)


def test_async_grpo_on_ray_workers(model_dir, local_history):
    """Asynchronous generation on the Ray workers: at staleness 0 it equals local GRPO;
    at staleness 1 each batch is sampled one policy version behind."""
    lagless = GRPO(
        **_settings(
            model_dir,
            backend="ray",
            ray={"num_workers": 1},
            async_generation=True,
            max_staleness=0,
            mismatch_correction="none",
        )
    )
    lagless.learn()
    assert _learning_metrics(lagless.history) == _learning_metrics(local_history)
    stale = GRPO(
        **_settings(
            model_dir, backend="ray", ray={"num_workers": 2}, async_generation=True, steps=4
        )
    )
    stale.learn()
    train = [r for r in stale.history if "train/loss" in r]
    assert [r["train/staleness"] for r in train] == [0.0, 1.0, 1.0, 1.0]
    assert all(r["train/mismatch_kl"] > 1e-6 for r in train[1:])


def test_two_workers_keep_order_groups_and_seeded_streams(model_dir):
    model, tokenizer = load_lm(ModelConfig(path=model_dir))
    config = RayConfig(num_workers=2)
    sampler = RaySampler(
        config, ModelConfig(path=model_dir), model, tokenizer.pad_token_id, group_size=4
    )
    prompts = [p for p in ("1+2=", "30+4=", "5+67=", "8+9=", "10+11=") for _ in range(4)]
    sampling = SamplingConfig(max_new_tokens=6)
    try:
        assert sampler.shards(20) == [(0, 8), (8, 20)]  # whole groups of 4 per worker
        first = sampler.generate(prompts, sampling, torch.Generator().manual_seed(0))
        real = first.prompt_ids.masked_fill(first.prompt_mask == 0, tokenizer.pad_token_id)
        assert tokenizer.batch_decode(real.tolist(), skip_special_tokens=True) == prompts
        ray.kill(sampler.workers[1], no_restart=True)
        again = sampler.generate(prompts, sampling, torch.Generator().manual_seed(0))
        assert sampler.counters == {"worker_restarts": 1, "weight_broadcasts": 1}
        assert torch.equal(again.completion_ids, first.completion_ids)
        assert torch.equal(again.logprobs, first.logprobs)
        other = sampler.generate(prompts, sampling, torch.Generator().manual_seed(1))
        assert not torch.equal(other.completion_ids, first.completion_ids)
        with torch.no_grad():
            next(model.parameters()).add_(0.5)  # a learner update: broadcast a new version
        sampler.generate(prompts, sampling, torch.Generator().manual_seed(0))
        assert sampler.counters["weight_broadcasts"] == 2
        # A fused optimizer writes weights without moving torch's version counter: the
        # trainer's weights_updated() call is what makes the next generate send them.
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.ones_like(p)
        torch.optim.AdamW(params, lr=0.1, fused=True).step()
        sampler.weights_updated()
        sampler.generate(prompts, sampling, torch.Generator().manual_seed(0))
        assert sampler.counters["weight_broadcasts"] == 3
    finally:
        sampler.close()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backend": "spark"}, "backend"),
        ({"backend": "ray", "ray": {"num_workers": 0}}, "ray.num_workers"),
        ({"backend": "ray", "ray": {"overlap": True}}, "ray.overlap"),
        ({"backend": "ray", "ray": {"workers": 2}}, "num_workers"),
    ],
)
def test_config_errors_name_the_bad_key(model_dir, overrides, message):
    with pytest.raises(ConfigError, match=message):
        GRPO(**_settings(model_dir, **overrides))
