"""The ranges of config keys whose fields do not declare theirs yet, by key name.

Every other config key declares its range beside it:
`field(default=..., metadata=in_range(...))`. The keys here are declared in files that were
being refactored when the ranges moved out of core (#58 item 4); each entry names the files
and classes still to annotate. To finish one: give each of its fields there the entry's
metadata (a subclass that redeclares a key carries it too), then delete the entry; delete
this module, and its register_ranges call in payoff/algos/__init__.py, once it is empty.
`tests/test_config.py` fails while a numeric key has neither a range nor an entry here.

payoff/algos/__init__.py registers the table with core (register_ranges), which checks a field
without a declaration of its own against the entry for its name. This module imports core
only: `import payoff.algos` stays light.
"""

from __future__ import annotations

from typing import Any

from payoff.core.config import (
    MAX_BATCH,
    MAX_DEPTH,
    MAX_GROUP,
    MAX_PROMPTS,
    MAX_SEED,
    MAX_THREADS,
    MAX_TOKENS,
    in_range,
)

POSITIVE = in_range(0, low_open=True)
NON_NEGATIVE = in_range(0)
UNIT = in_range(0, 1)

PENDING_RANGES: dict[str, dict[str, Any]] = {
    # step sizes, clip ranges, temperatures: > 0
    # shared/lm.py LMKeys, shared/onpolicy.py OnPolicyConfig (a Schedule), grpo.py,
    # rlhf_ppo.py, reward_model.py, sft.py, agent_grpo.py (AgentGRPOConfig, DemoSFTConfig)
    "learning_rate": POSITIVE,
    "critic_learning_rate": POSITIVE,  # rlhf_ppo.py
    "proxy_learning_rate": POSITIVE,  # rlhf_ppo.py
    "clip": POSITIVE,  # ppo.py (a Schedule), rlhf_ppo.py
    "clip_eps": POSITIVE,  # grpo.py, agent_grpo.py
    "clip_eps_high": POSITIVE,  # grpo.py
    "value_clip": POSITIVE,  # rlhf_ppo.py
    "kl_target": POSITIVE,  # rlhf_ppo.py
    "temperature": POSITIVE,  # grpo.py, rlhf_ppo.py, agent_grpo.py
    # counts: > 0
    # shared/lm.py LMKeys, sft.py, dpo.py, rlhf_ppo.py, agent_grpo.py (AgentGRPOConfig,
    # DemoSFTConfig)
    "steps": POSITIVE,
    "ppo_epochs": POSITIVE,  # rlhf_ppo.py
    "proxy_steps": POSITIVE,  # rlhf_ppo.py
    "updates_per_batch": POSITIVE,  # grpo.py, agent_grpo.py
    # sft.py, dpo.py, grpo.py, rlhf_ppo.py, reward_model.py, agent_grpo.py
    "log_every": POSITIVE,
    # shared/onpolicy.py, sft.py, dpo.py, grpo.py, rlhf_ppo.py, reward_model.py, agent_grpo.py
    "checkpoint_every": POSITIVE,
    # sft.py, dpo.py, dqn.py, reward_model.py, agent_grpo.py DemoSFTConfig
    "batch_size": in_range(0, low_open=True, most=MAX_BATCH),
    "ensemble": in_range(0, low_open=True, most=MAX_DEPTH),  # reward_model.py
    # sft.py, dpo.py, grpo.py, rlhf_ppo.py, agent_grpo.py
    "max_new_tokens": in_range(0, low_open=True, most=MAX_TOKENS),
    "kl_horizon": in_range(0, low_open=True, most=MAX_TOKENS),  # rlhf_ppo.py
    # grpo.py, rlhf_ppo.py. (262,144 completions of arithmetic-grpo's tiny model passed
    # 23 GB and were OOM-killed: more than 90 KB each, so memory grows with this product;
    # mind it on a large model.)
    "prompts_per_step": in_range(
        0,
        low_open=True,
        most=MAX_PROMPTS,
        product=("group_size", 65_536, "completions in one rollout batch"),
    ),
    # agent_grpo.py
    "tasks_per_step": in_range(
        0,
        low_open=True,
        most=MAX_PROMPTS,
        product=("group_size", 65_536, "episodes in one rollout batch"),
    ),
    # a group of one has no mean to compare against: grpo.py, agent_grpo.py
    "group_size": in_range(2, most=MAX_GROUP),
    # counts with no lower bound of their own (validate() checks theirs), held to a bound above
    "microbatch_size": in_range(most=MAX_BATCH),  # grpo.py
    "overlong_buffer": in_range(most=MAX_TOKENS),  # grpo.py
    # optional counts (0 = off / automatic), coefficients and penalties: >= 0
    # shared/onpolicy.py, sft.py, dpo.py, grpo.py, rlhf_ppo.py, reward_model.py, agent_grpo.py
    "eval_every": NON_NEGATIVE,
    # ppo.py, recurrent_ppo.py, grpo.py, rlhf_ppo.py
    "minibatch_size": in_range(0, most=MAX_BATCH),
    "warmup_steps": NON_NEGATIVE,  # sft.py, grpo.py, agent_grpo.py
    "max_grad_norm": NON_NEGATIVE,  # shared/lm.py LMKeys, dqn.py, agent_grpo.py
    "value_coef": NON_NEGATIVE,  # rlhf_ppo.py
    "kl_coef": NON_NEGATIVE,  # rlhf_ppo.py
    "beta": NON_NEGATIVE,  # dpo.py, grpo.py
    "weight_decay": NON_NEGATIVE,  # shared/lm.py LMKeys, rlhf_ppo.py
    "final_eval_k": in_range(1),  # grpo.py
    "sampler_threads": in_range(0, MAX_THREADS),  # grpo.py
    "seed": in_range(0, MAX_SEED),  # agent_grpo.py DemoSFTConfig
    # discounts, probabilities and fractions
    "gamma": UNIT,  # rlhf_ppo.py, agent_grpo.py
    "lam": UNIT,  # rlhf_ppo.py
    "negative_weight": UNIT,  # agent_grpo.py
    "stop_at_accuracy": UNIT,  # sft.py
    "top_p": in_range(0, 1, low_open=True),  # grpo.py
    "answer_noise": in_range(0, 1, high_open=True),  # sft.py
}
