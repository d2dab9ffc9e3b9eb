"""Agents end to end: GRPO on whole tool-using episodes raises held-out success.

calculator-agent: the recipe's SFT base is a 64-wide, 2-layer tiny Llama (900 SFT steps at 0.13 s instead of
the default model's 0.91 s: that base used to be 8 of this test's ~9.4 min from a cold
cache). The test runs the recipe's first 20 of 40 GRPO steps on its 128 held-out problems.

Measured (seed 0, cold $PAYOFF_CACHE, nice -n 15 on the shared 2-core machine, load ~3):
~3.0 min in all (SFT 148 s, 20 GRPO steps 27 s, evaluations 2 s).
Held-out greedy success 0.703 -> 0.766 (step 10) -> 0.820 (step 20); on the large problems,
where calling the calculator pays, 0.476 -> 0.762 as calls there go 0.54 -> 0.89 per episode.
Identical numbers on every run with the same seed (three cold runs). GRPO seeds 1 and 2 on
the same base gain more: 0.680 -> 0.922 and 0.711 -> 0.953 (large problems +0.34 both).
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


STEPS = 20
# Half the gains measured with seed 0 (+0.117 overall, +0.286 on large problems), the
# smallest of three GRPO seeds, for margin.
GAIN = 0.05
HARD_GAIN = 0.14


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
