"""Asynchronous generation: a child process (and Ray) sampling equals local sampling, batches
keep the weights version they were submitted with, seeds, errors, a killed child."""

from __future__ import annotations

import copy
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.core.errors import RunError  # noqa: E402
from payoff.models.lm import ModelConfig, load_lm  # noqa: E402
from payoff.rollout.async_generation import ProcessSampler  # noqa: E402
from payoff.rollout.generation import Generation, LocalSampler, SamplingConfig  # noqa: E402

PROMPTS = [p for p in ("1+2=", "30+4=", "5+67=") for _ in range(3)]  # groups of 3
SAMPLING = SamplingConfig(max_new_tokens=6, stop=["="])


def local(model: Any, tokenizer: Any, generator: torch.Generator) -> Generation:
    """Sampling in this process, with one torch thread like the child."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return LocalSampler(model, tokenizer).generate(PROMPTS, SAMPLING, generator)
    finally:
        torch.set_num_threads(threads)


def assert_same(a: Generation, b: Generation) -> None:
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "truncated"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.logprobs, b.logprobs)  # bit for bit, not allclose
    assert a.completions == b.completions


@pytest.fixture(scope="module")
def learner() -> Iterator[tuple[Any, Any, ProcessSampler]]:
    """The learner's model and a sampler whose child starts from other weights (seed 1), so
    that matching local sampling proves the learner's weights were sent."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    sampler = ProcessSampler(ModelConfig(), model, tokenizer.pad_token_id, seed=1, threads=1)
    yield model, tokenizer, sampler
    sampler.close()


def test_process_generate_equals_local_bit_for_bit(learner):
    model, tokenizer, sampler = learner
    remote_generator = torch.Generator().manual_seed(3)
    local_generator = torch.Generator().manual_seed(3)
    assert_same(
        sampler.generate(PROMPTS, SAMPLING, remote_generator),
        local(model, tokenizer, local_generator),
    )
    assert torch.equal(remote_generator.get_state(), local_generator.get_state())
    metrics = sampler.metrics()
    assert metrics["async/weight_pushes"] >= 1 and 3.5 < metrics["async/weight_mb"] < 4.5


def test_a_batch_keeps_the_weights_it_was_submitted_with(learner):
    model, tokenizer, sampler = learner
    old_model = copy.deepcopy(model)
    before = sampler.submit(PROMPTS, SAMPLING, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():  # an optimizer step the version counter does not see (like fused AdamW)
        for p in model.parameters():
            p.data.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(9)))
    sampler.weights_updated()
    after = sampler.submit(PROMPTS, SAMPLING, generator=torch.Generator().manual_seed(5))
    assert before.version < after.version == sampler.version
    assert_same(before.result(), local(old_model, tokenizer, torch.Generator().manual_seed(5)))
    new = after.result()
    assert_same(new, local(model, tokenizer, torch.Generator().manual_seed(5)))
    # Nothing changed since: the next batch is sampled with the same version, nothing sent.
    pushes = sampler.counters["weight_pushes"]
    again = sampler.submit(PROMPTS, SAMPLING, generator=torch.Generator().manual_seed(5))
    assert again.version == after.version and sampler.counters["weight_pushes"] == pushes
    assert_same(again.result(), new)
    with pytest.raises(RunError, match="once"):
        again.result()


def test_weight_versions_reuse_the_ring_and_it_is_freed_at_close():
    """Nine versions through the ring's 4 slots (reused), the last five submitted without
    waiting for a batch in between (the fifth reuses the slot of the first of them, which
    the learner overwrites only once the child has read it); every batch samples with the
    weights it was submitted with."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    sampler = ProcessSampler(ModelConfig(), model, tokenizer.pad_token_id, seed=1, threads=1)
    try:
        expected, pending = [], []
        for step in range(9):
            with torch.no_grad():
                next(model.parameters()).add_(0.01)
            sampler.weights_updated()
            pending.append(sampler.submit(PROMPTS, SAMPLING, seed=step))
            expected.append(local(model, tokenizer, torch.Generator().manual_seed(step)))
            if step < 4:
                assert_same(pending[-1].result(), expected[-1])
        for batch, wanted in zip(pending[4:], expected[4:], strict=True):
            assert_same(batch.result(), wanted)
        (ring,) = sampler.start().rings  # one ring, its slots reused
        assert sampler.counters["weight_pushes"] == 9
        assert os.path.exists(ring.path)
    finally:
        sampler.close()
    assert ring.shared.fd is None  # a memfd: gone with its last holder
    assert ring.shared.folder is None or not os.path.exists(ring.shared.folder)


def test_seeded_batches_in_flight_together_are_reproducible(learner):
    model, tokenizer, sampler = learner
    first, second, other = (sampler.submit(PROMPTS, SAMPLING, seed=s) for s in (7, 7, 8))
    a, b, c = first.result(), second.result(), other.result()
    assert_same(a, b)
    assert_same(a, local(model, tokenizer, torch.Generator().manual_seed(7)))
    assert not torch.equal(a.completion_ids, c.completion_ids)
    # One generator's stream carries one batch at a time; a second would repeat the first.
    generator = torch.Generator().manual_seed(0)
    pending = sampler.submit(PROMPTS, SAMPLING, generator=generator)
    with pytest.raises(RunError, match="already has a batch in flight"):
        sampler.submit(PROMPTS, SAMPLING, generator=generator)
    pending.result()


def test_an_error_in_the_child_is_raised_by_result_and_the_child_goes_on(learner):
    model, tokenizer, sampler = learner
    nothing_kept = SamplingConfig(max_new_tokens=4, top_p=0.0)  # not validated: NaN probs
    with pytest.raises(RunError, match="RuntimeError") as raised:
        sampler.submit(PROMPTS, nothing_kept, seed=0).result()
    assert "Traceback" in str(raised.value.__cause__)  # the child's own traceback
    assert sampler.generate(PROMPTS, SAMPLING).completion_ids.shape[0] == len(PROMPTS)


def test_a_killed_child_fails_the_batch_promptly_and_close_is_idempotent():
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    sampler = ProcessSampler(ModelConfig(), model, tokenizer.pad_token_id)
    assert sampler.pid is None  # nothing started until the first batch
    sampler.generate(PROMPTS, SAMPLING)
    pid = sampler.pid
    assert pid is not None and sampler.startup_seconds > 0
    many = SamplingConfig(max_new_tokens=200)  # still sampling when the child dies
    pending = sampler.submit(PROMPTS * 20, many, seed=0)
    os.kill(pid, signal.SIGKILL)
    started = time.perf_counter()
    with pytest.raises(RunError, match=f"pid {pid}.*SIGKILL"):
        pending.result()
    assert time.perf_counter() - started < 5.0
    with pytest.raises(RunError, match="SIGKILL"):
        sampler.submit(PROMPTS, SAMPLING, seed=0)
    sampler.close()
    sampler.close()
    assert sampler.pid is None


def test_ray_submit_keeps_versions_and_seeds_every_shard(ray_cluster):
    from payoff.rollout.ray_generation import RaySampler, shard_seed
    from payoff.rollout.ray_pool import RayConfig

    model, tokenizer = load_lm(ModelConfig(), seed=0)
    old_model = copy.deepcopy(model)
    # The shared 2-CPU instance frees an earlier test's actors in its own time: on a loaded
    # machine that took longer than the default 120 s twice (2026-11-29).
    config = RayConfig(num_workers=2, startup_timeout=300.0)
    sampler = RaySampler(config, ModelConfig(), model, tokenizer.pad_token_id, group_size=3)
    try:
        before = sampler.submit(PROMPTS, SAMPLING, seed=11)
        with torch.no_grad():
            next(model.parameters()).add_(0.5)
        after = sampler.submit(PROMPTS, SAMPLING, seed=11)
        assert before.version < after.version
        # Each shard (whole groups) is sampled from shard_seed(11, k).
        for pending, weights in ((before, old_model), (after, model)):
            generation = pending.result()
            for k, (start, stop) in enumerate(sampler.shards(len(PROMPTS))):
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                try:
                    part = LocalSampler(weights, tokenizer).generate(
                        PROMPTS[start:stop],
                        SAMPLING,
                        torch.Generator().manual_seed(shard_seed(11, k)),
                    )
                finally:
                    torch.set_num_threads(threads)
                width = part.completion_ids.shape[1]
                assert torch.equal(
                    generation.completion_ids[start:stop, :width], part.completion_ids
                )
                assert torch.equal(generation.logprobs[start:stop, :width], part.logprobs)
    finally:
        sampler.close()


def test_flat_weight_files_round_trip_and_a_wrong_size_is_refused():
    from payoff.rollout.async_generation import _unflatten

    weights = {"a": torch.randn(3, 4).to(torch.bfloat16), "b": torch.randn(5).to(torch.bfloat16)}
    flat = torch.cat([t.reshape(-1) for t in weights.values()])
    data = bytes(flat.view(torch.uint8).numpy().data)
    layout = [[name, list(t.shape)] for name, t in weights.items()]
    back = _unflatten(data, layout, "torch.bfloat16", "test weights")
    assert all(torch.equal(back[name], weights[name]) for name in weights)
    with pytest.raises(RunError, match="holds 17 values, but its layout names 18"):
        _unflatten(data, [["a", [3, 4]], ["b", [6]]], "torch.bfloat16", "test weights")
    with pytest.raises(RunError, match="unknown weights layout"):
        _unflatten(data, layout, "torch.int64", "test weights")


def test_the_ring_waits_for_a_slot_to_be_read_and_gives_up_clearly(tmp_path, monkeypatch):
    """No child here: nobody reads, so the fifth version (the first slot again) waits,
    until check_alive raises or the patience runs out."""
    from payoff.rollout.async_generation import _slot, _WeightRing

    weights = [torch.arange(6.0).view(2, 3), torch.ones(2)]
    ring = _WeightRing(8 * 4, version=1)
    for version in range(1, 5):
        assert ring.write(version, [w * version for w in weights], lambda: None) == version % 4
    assert torch.equal(_slot(ring.memory, 2, 32, torch.float32)[:6], torch.arange(6.0) * 2)

    def gone() -> None:
        raise RunError("the child is gone")

    with pytest.raises(RunError, match="gone"):
        ring.write(5, weights, gone)
    monkeypatch.setattr(_WeightRing, "PATIENCE", 0.05)
    with pytest.raises(RunError, match="has not read weights version 1 in 0 s"):
        ring.write(5, weights, lambda: None)
    ring.loaded[1] = 1  # the child read version 1: its slot is free again
    assert ring.write(5, weights, lambda: None) == 1


@pytest.mark.slow  # two interpreters import torch and transformers: ~15 s
def test_a_script_without_a_main_guard_is_told_what_stopped_its_sampler(tmp_path):
    # spawn imports the main script again in the child, which starts a sampler there too
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from payoff.models.lm import ModelConfig, load_lm\n"
        "from payoff.rollout.async_generation import ProcessSampler\n"
        "model, tokenizer = load_lm(ModelConfig())\n"
        "ProcessSampler(ModelConfig(), model, tokenizer.pad_token_id).start(wait=True)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("payoff.core.errors.RunError: "), last
    assert 'put that under `if __name__ == "__main__":`' in last and "unguarded.py" in last
