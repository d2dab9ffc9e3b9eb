"""calculator-agent end to end: GRPO on whole tool-using episodes raises held-out success.

The demonstration-SFT base model is cached under $PAYOFF_CACHE (default ~/.cache/payoff):
the first run trains it (900 SFT steps, several minutes on 2 cores), later runs reuse it.
"""

from __future__ import annotations

import pytest

from payoff.algos.agent_grpo import AgentGRPO
from payoff.core.config import from_dict
from payoff.recipes import load_recipe


@pytest.mark.slow
@pytest.mark.expensive  # ~9 min on 2 cores from a cold cache: demonstration SFT, then GRPO
def test_calculator_agent_improves_success():
    _, recipe = load_recipe("calculator-agent")
    recipe.pop("description", None)
    recipe.pop("algo", None)
    recipe.update(steps=STEPS, eval_every=STEPS)
    agent = AgentGRPO(config=from_dict(AgentGRPO.config_class, recipe))
    agent.learn()
    evals = [r for r in agent.history if "eval/success" in r]
    start, end = evals[0], evals[-1]
    assert end["eval/success"] >= start["eval/success"] + GAIN, (start, end)
    assert end["eval/malformed"] <= start["eval/malformed"] + 0.05


STEPS = 20
GAIN = 0.1
