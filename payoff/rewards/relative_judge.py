"""Relative judging: score a group of trajectories for the same task against each other.

In the spirit of ART's RULER: a judge sees the task and all G trajectories at once and
scores each; because only the ranking within the group matters to GRPO, the scores are then
normalized within the group (z-score, min-max or rank), which removes the judge's own
offset and scale. The judge is any callable `(task, transcripts) -> scores`: a local
heuristic, or an LLM through payoff.rewards.judge's chat clients (`llm_relative_judge`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from payoff.core.errors import ConfigError
from payoff.rewards.judge import ChatClient, JudgeError

GroupJudge = Callable[[dict[str, Any], Sequence[str]], Sequence[float]]
NORMALIZATIONS = ("zscore", "minmax", "rank")


def normalize_group(scores: Sequence[float], how: str = "zscore", eps: float = 1e-6) -> list[float]:
    """Scores made relative within their group.

    zscore: (s - mean) / (std + eps), mean 0; minmax: best 1, worst 0; rank: average rank
    scaled to [0, 1] (ties share). A group whose scores are all equal becomes all 0 (zscore)
    or all 0.5 (minmax, rank): no preference, no learning signal.
    """
    if how not in NORMALIZATIONS:
        raise ConfigError(f"judge normalization {how!r} is unknown; valid: {NORMALIZATIONS}")
    x = torch.tensor([float(s) for s in scores], dtype=torch.float64)
    if x.numel() == 0:
        return []
    spread = float(x.max() - x.min())
    if how == "zscore":
        std = float(x.std(unbiased=False)) if x.numel() > 1 else 0.0
        return ((x - x.mean()) / (std + eps)).tolist() if spread > 0 else [0.0] * x.numel()
    if spread == 0:
        return [0.5] * x.numel()
    if how == "minmax":
        return ((x - x.min()) / spread).tolist()
    # Average rank for ties: a tie must not favour whichever came first.
    ranks = torch.empty_like(x)
    order = x.argsort()
    ranks[order] = torch.arange(x.numel(), dtype=x.dtype)
    for value in x.unique():
        same = x == value
        ranks[same] = ranks[same].mean()
    return (ranks / (x.numel() - 1)).tolist()


class RelativeJudge:
    """Scores groups of trajectories with `judge` and normalizes each group (`how`)."""

    def __init__(self, judge: GroupJudge, how: str = "zscore"):
        normalize_group([], how)  # validates `how`
        self.judge, self.how = judge, how

    def __call__(self, task: dict[str, Any], transcripts: Sequence[str]) -> list[float]:
        raw = list(self.judge(task, transcripts))
        if len(raw) != len(transcripts):
            raise JudgeError(
                f"judge returned {len(raw)} scores for {len(transcripts)} trajectories"
            )
        return normalize_group(raw, self.how)


def answer_judge(task: dict[str, Any], transcripts: Sequence[str]) -> list[float]:
    """A local judge: 1 for a transcript whose final answer is right, minus 0.01 per character.

    A stand-in for an LLM judge in tests and on CPU: it prefers right over wrong and, among
    right ones, the shorter trajectory.
    """
    expected = str(task.get("answer", "")).strip()
    scores = []
    for text in transcripts:
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.S)
        right = bool(answers) and answers[-1].strip() == expected
        scores.append(float(right) - 0.01 * len(text) / 100)
    return scores


def llm_relative_judge(client: ChatClient, rubric: str = "") -> GroupJudge:
    """A judge that asks a chat model (OpenAI-compatible endpoint or local) to score a group.

    The model is given the task and the numbered trajectories and must reply with a JSON
    list of G numbers in [0, 1]; anything else raises JudgeError.
    """

    def judge(task: dict[str, Any], transcripts: Sequence[str]) -> list[float]:
        listing = "\n\n".join(f"Trajectory {i + 1}:\n{t}" for i, t in enumerate(transcripts))
        messages = [
            {
                "role": "system",
                "content": "You compare attempts at the same task. Score each from 0 (worst) to 1 "
                "(best) relative to the others. Reply with only a JSON list of numbers, one per "
                "trajectory." + (f" Rubric: {rubric}" if rubric else ""),
            },
            {"role": "user", "content": f"Task: {task.get('question', '')}\n\n{listing}"},
        ]
        reply = client.complete(messages)
        match = re.search(r"\[.*?\]", reply, re.S)
        try:
            scores = json.loads(match.group(0)) if match else None
        except json.JSONDecodeError:
            scores = None
        if not isinstance(scores, list) or len(scores) != len(transcripts):
            raise JudgeError(
                f"relative judge must reply with a JSON list of {len(transcripts)} numbers, got {reply[:120]!r}"
            )
        return [float(s) for s in scores]

    return judge
