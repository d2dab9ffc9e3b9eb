"""doc-search agent: the malformed-call cost and the negative-advantage weight of agent GRPO."""

from __future__ import annotations

import numpy as np
import pytest

from payoff.envs.text import PlainFormat
from payoff.envs.text.tasks import answer_turn, tool_turn
from payoff.rollout.episodes import replay_episode


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """A tiny doc-search agent (2 SFT steps: only its config, task and tokenizer are used)."""
    from payoff.algos.agent_grpo import AgentGRPO

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAYOFF_CACHE", str(tmp_path_factory.mktemp("cache")))
        return AgentGRPO(
            sft={
                "demonstrations": 8,
                "steps": 2,
                "batch_size": 4,
                "tiny": {"hidden_size": 32, "layers": 1, "heads": 2, "intermediate_size": 64},
            },
            task={"name": "doc-search", "max_turns": 5, "max_tokens": 400, "eval_size": 4},
            steps=1,
            tasks_per_step=2,
            group_size=2,
            max_new_tokens=12,
            tool_cost=0.1,
            malformed_cost=0.5,
        )


def test_malformed_cost_charges_the_turn_whose_call_the_env_rejected(agent):
    task = agent.task.sample(np.random.default_rng(0), 1)[0]
    turns = [
        tool_turn("search", query=task["person"]),
        '<tool>{"name":"open","arguments":{"name":</tool>',  # broken JSON
        tool_turn("open", name=task["person"].lower()),
        answer_turn(task["answer"]),
    ]
    episode = replay_episode(agent.task.make_env(), task, turns, PlainFormat(), agent.tokenizer)
    assert episode.info["malformed"] == 1
    assert agent.efficiency(episode) == [-0.1, -0.6, -0.1, 0.0]
    assert agent.rewards([episode]) == [[-0.1, -0.6, -0.1, 1.0]]
    agent.config.malformed_cost = 0.0  # the default: a rejected call costs what any call costs
    try:
        assert agent.efficiency(episode) == [-0.1, -0.1, -0.1, 0.0]
    finally:
        agent.config.malformed_cost = 0.5


@pytest.mark.parametrize("credit", ["trajectory", "turn"])
def test_negative_weight_scales_only_below_average_episodes(agent, credit):
    agent.config.credit = credit
    per_turn = [[0.0, 1.0], [0.0, 0.0]]  # one group of 2: a success and a failure
    try:
        plain = agent.advantages(per_turn)
        agent.config.negative_weight = 0.0
        positive_only = agent.advantages(per_turn)
    finally:
        agent.config.credit, agent.config.negative_weight = "trajectory", 1.0
    assert plain[0][0] > 0 > plain[1][0]
    assert positive_only[0] == plain[0]
    assert positive_only[1] == [0.0, 0.0]
