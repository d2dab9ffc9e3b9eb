"""Agents end to end: GRPO on whole tool-using episodes raises held-out success.

calculator-agent: the recipe's SFT base is a 64-wide, 2-layer tiny Llama (900 SFT steps at 0.13 s instead of
the default model's 0.91 s: that base used to be 8 of this test's ~9.4 min from a cold
cache). The test runs the recipe's 60 GRPO steps on its 128 held-out problems.

Measured (seed 0) on two kinds of CPU kernels, whose float rounding differs (AVX-512 on the
development machine, and AVX2 forced with ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2): held-out
greedy success 0.703 -> 0.625 (step 10) -> 0.758 (20) -> 0.875 (60), large problems
0.540 -> 0.762; and 0.648 -> 0.734 (20) -> 0.875 (60), large problems 0.397 -> 0.794.
After 20 steps, as this test once ran, the first gained only +0.055 and +0.048 on large
problems, and CI's machine 0.672 -> 0.664: early GRPO is noisy, so the test runs 60 steps.
~2.5 min in all from a cold cache (SFT ~70 s, 60 GRPO steps ~50-60 s).
The base is cached under $PAYOFF_CACHE, so later runs take ~45 s.
"""

from __future__ import annotations

import pytest

from payoff.algos.agent_grpo import AgentGRPO
from payoff.core.config import from_dict
from payoff.recipes import load_recipe


@pytest.mark.slow
@pytest.mark.expensive  # ~3 min on 2 cores from a cold cache: demonstration SFT, then GRPO
def test_calculator_agent_improves_success():
    _, recipe = load_recipe("calculator-agent")
    recipe.pop("description", None)
    recipe.pop("algo", None)
    recipe.update(steps=STEPS, eval_every=10)
    agent = AgentGRPO(config=from_dict(AgentGRPO.config_class, recipe))
    agent.learn()
    evals = [r for r in agent.history if "eval/success" in r]
    start, end = evals[0], evals[-1]
    assert end["eval/success"] >= start["eval/success"] + GAIN, (start, end)
    assert end["eval/success_hard"] >= start["eval/success_hard"] + HARD_GAIN, (start, end)
    assert end["eval/malformed"] <= start["eval/malformed"] + 0.05, (start, end)


STEPS = 60
# About half the smaller of the two measured gains (+0.172 overall, +0.222 on large problems).
GAIN = 0.08
HARD_GAIN = 0.11


@pytest.mark.slow
@pytest.mark.expensive  # ~2.5 min on 2 cores from a cold cache: demonstration SFT, then GRPO
def test_doc_search_agent_learns_to_take_the_second_hop():
    """The demonstrator stops one document short on half the two-hop questions; GRPO fixes it.

    Measured (seed 0, 128 held-out questions): success 0.695 -> 0.930 after 10 GRPO steps,
    two-hop questions 0.409 -> 0.864 as their tool calls go 2.41 -> 2.95 per episode (the
    chain takes 3: search, open the person, open the city). GRPO seed 1: 0.711 -> 0.938.
    """
    _, recipe = load_recipe("doc-search-agent")
    recipe.pop("description", None)
    recipe.pop("algo", None)
    recipe.update(steps=10, eval_every=10)
    agent = AgentGRPO(config=from_dict(AgentGRPO.config_class, recipe))
    agent.learn()
    evals = [r for r in agent.history if "eval/success" in r]
    start, end = evals[0], evals[-1]
    # About half the gains seed 0 measured (+0.235 overall, +0.455 and +0.54 calls on two hops).
    assert end["eval/success"] >= start["eval/success"] + 0.12, (start, end)
    assert end["eval/success_two_hops"] >= start["eval/success_two_hops"] + 0.22, (start, end)
    assert end["eval/tool_calls_two_hops"] >= start["eval/tool_calls_two_hops"] + 0.25
    assert end["eval/success_one_hop"] >= start["eval/success_one_hop"] - 0.05, (start, end)
