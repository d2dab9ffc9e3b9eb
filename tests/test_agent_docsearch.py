"""doc-search agent: the malformed-call cost charges the turn whose call the env rejected."""

from __future__ import annotations

import numpy as np

from payoff.envs.text import PlainFormat
from payoff.envs.text.tasks import answer_turn, tool_turn
from payoff.rollout.episodes import replay_episode


def _tiny_doc_agent(tmp_path, monkeypatch, **overrides):
    from payoff.algos.agent_grpo import AgentGRPO

    monkeypatch.setenv("PAYOFF_CACHE", str(tmp_path / "cache"))
    config = {
        "sft": {
            "demonstrations": 8,
            "steps": 2,
            "batch_size": 4,
            "tiny": {"hidden_size": 32, "layers": 1, "heads": 2, "intermediate_size": 64},
        },
        "task": {"name": "doc-search", "max_turns": 5, "max_tokens": 400, "eval_size": 4},
        "steps": 1,
        "tasks_per_step": 2,
        "group_size": 2,
        "max_new_tokens": 12,
        **overrides,
    }
    return AgentGRPO(**config)


def test_malformed_cost_charges_the_turn_whose_call_the_env_rejected(tmp_path, monkeypatch):
    agent = _tiny_doc_agent(tmp_path, monkeypatch, tool_cost=0.1, malformed_cost=0.5)
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
    # default 0: a rejected call costs only what any call costs
    plain = _tiny_doc_agent(tmp_path, monkeypatch, tool_cost=0.1)
    assert plain.efficiency(episode) == [-0.1, -0.1, -0.1, 0.0]
