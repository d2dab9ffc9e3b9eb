"""Reward model: an LM backbone with a scalar head, fit to preference pairs by Bradley-Terry.

    r_w, r_l = RM(prompt + chosen), RM(prompt + rejected)
    loss     = -log sigmoid(r_w - r_l)                       (InstructGPT, eq. 1)

An ensemble of K members (different head seeds, each on its own bootstrap resample of the
pairs) trains side by side; their spread on a pair is the uncertainty a conservative reward
(mean - k * std) or the disagreement monitor reads. Held-out accuracy is measured twice: against
the rater's labels (what the model was taught) and against the gold scorer (what we wanted);
the gap between the two is the rater's bias, learned.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from payoff.algos.base import Algorithm
from payoff.algos.sft import build_base_model
from payoff.algos.shared.lm import NO_FINAL_LM_EVALUATION, LMKeys
from payoff.algos.shared.preference import bradley_terry_loss
from payoff.core.config import MAX_BATCH, MAX_DEPTH, in_range
from payoff.core.device import resolve_device
from payoff.core.seeding import seed_everything
from payoff.envs.tasks import Row, TaskConfig, make_task
from payoff.envs.tasks.preferences import PreferenceDataConfig, load_pairs
from payoff.models.base_model import BaseModelConfig, resolve_model, set_threads
from payoff.models.chat import has_chat_template
from payoff.models.lm import ModelConfig, check_pairs_fit
from payoff.models.lm_optim import adamw, train_step
from payoff.models.logprobs import (
    pack_shared_prompts,
    packable,
    packed_last_hidden,
    tokenize_starts,
)
from payoff.models.tiny_lm import TinyLMConfig
from payoff.rewards.learned import RewardModelScorer, ScalarHeadModel, build_scalar_model


def styled_task() -> TaskConfig:
    return TaskConfig(name="styled_addition", eval_size=64)


def small_base() -> BaseModelConfig:
    """A ~100k-parameter tiny Llama SFT-trained briefly: enough for 1-digit sums, fast on a busy CPU."""
    return BaseModelConfig(
        steps=200,
        batch_size=64,
        tiny=TinyLMConfig(hidden_size=64, layers=2, heads=2, intermediate_size=128, max_length=64),
    )


def preference_base(
    task: TaskConfig, base: BaseModelConfig, device: str = "auto"
) -> Callable[[], Path]:
    """What builds (or finds) the tiny SFT base model of a preference run given no model.path.

    Every preference algorithm asks for the same base (same settings, same 24-token
    evaluation), so the reward model, DPO, best-of-N and PPO-RLHF share one cached SFT model.
    device: where it trains if it is not cached yet (the run's device key).
    """
    return lambda: build_base_model(task, base, max_new_tokens=24, device=device)


@dataclass
class RewardModelConfig(LMKeys):
    """Bradley-Terry reward model(s) on preference pairs. Shared keys (seed, threads, steps
    per member, learning_rate, weight_decay, max_grad_norm, log/eval/checkpoint intervals in
    optimizer steps; eval_every 0 = no evaluation during training): payoff.algos.shared.lm.LMKeys.

    model: the backbone. model.path = a local Hugging Face folder (usually the SFT policy);
        empty = payoff's tiny Llama SFT-trained on `task` first (`base` says how; cached).
        Starting from the policy's own weights matters: the RM must read what the policy writes.
    base: pretraining settings for that tiny base model (ignored when model.path is set).
    task: prompts and the gold scorer (styled_addition) when pairs are synthetic.
    preferences: where pairs come from (JSONL, or synthetic with a biased rater).
    ensemble: K members; > 1 reports their disagreement. Each trains on its own bootstrap
        resample (sampling pairs with replacement) with its own head seed.
    batch_size: pairs per optimizer step.
    learning_rate: the whole backbone trains; on a pretrained model keep it small (1e-5) or
        the RM forgets how to read.
    """

    base: BaseModelConfig = field(default_factory=small_base)
    task: TaskConfig = field(default_factory=styled_task)
    preferences: PreferenceDataConfig = field(default_factory=PreferenceDataConfig)
    ensemble: int = field(default=1, metadata=in_range(0, low_open=True, most=MAX_DEPTH))
    bootstrap: bool = True
    batch_size: int = field(default=64, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    log_every: int = field(default=10, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=100, metadata=in_range(0, low_open=True))

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 50}  # payoff train runs


Group = tuple[list[int], list[list[int]]]  # (prompt ids, [ids of each completion + EOS])


def encode_groups(
    model: ScalarHeadModel, prompts: Sequence[str], completions: Sequence[Sequence[str]]
) -> list[Group]:
    """Per prompt: (prompt ids, [ids of each completion + EOS]), for `score_packed`.

    Tokenized exactly as `ScalarHeadModel.encode` tokenizes prompt + completion; where a
    tokenizer merges across the boundary (the joint ids do not start with the prompt's),
    that group falls back to an empty prompt and whole sequences, so a score never depends
    on the split.
    """
    tok, eos = model.tokenizer, model.tokenizer.eos_token_id
    prompt_ids = tokenize_starts(tok, prompts)
    texts = [p + c for p, cs in zip(prompts, completions, strict=True) for c in cs]
    joint = iter(tokenize_starts(tok, texts))
    groups: list[Group] = []
    for prompt, cs in zip(prompt_ids, completions, strict=True):
        full = [[*next(joint), eos] for _ in cs]
        n = len(prompt)
        if all(len(f) > n and f[:n] == prompt for f in full):
            groups.append((prompt, [f[n:] for f in full]))
        else:
            groups.append(([], full))
    return groups


def score_packed(model: ScalarHeadModel, groups: Sequence[Group]) -> torch.Tensor:
    """Scores [N] of `encode_groups` output with gradients: each prompt runs once, no padding.

    Equal to `model.score` on the same pairs; completions are numbered group by group.
    Needs a backbone whose attention takes a 4D mask (`packable`: eager or SDPA).
    """
    pack = pack_shared_prompts(
        [p for p, _ in groups], [c for _, c in groups], model.tokenizer.pad_token_id
    )
    hidden = packed_last_hidden(model.body(), pack)
    return model.head(hidden.to(model.head.weight.dtype)).squeeze(-1).float()


@dataclass
class PairEval:
    """Held-out pairwise evaluation of a reward model (ensemble mean) and its members."""

    pairs: int
    accuracy: float  # agrees with the rater's label
    gold_accuracy: float  # agrees with the gold scorer, on pairs whose gold scores differ
    margin: float  # mean r_chosen - r_rejected
    disagreement: float  # mean over pairs of the members' std of the margin (0 with one member)
    member_accuracy: list[float]
    length_correlation: float  # corr(score, completion length): the spurious feature, learned

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        gold = (
            "" if math.isnan(self.gold_accuracy) else f", {self.gold_accuracy:.3f} (vs gold)"
        )  # your own pairs carry no gold scores
        text = (
            f"held-out pairwise accuracy {self.accuracy:.3f} (vs rater){gold} "
            f"on {self.pairs} pairs; margin {self.margin:.2f}; score-length correlation {self.length_correlation:+.2f}"
        )
        if len(self.member_accuracy) > 1:
            text += f"; {len(self.member_accuracy)} members, disagreement {self.disagreement:.3f}"
        return text


def evaluate_pairs(scorer: RewardModelScorer, rows: list[Row]) -> PairEval:
    """Accuracy, gold accuracy, margin and member disagreement of `scorer` on preference rows."""
    prompts = [r["prompt"] for r in rows]
    chosen = scorer.members(prompts, [r["chosen"] for r in rows])  # [K, B]
    rejected = scorer.members(prompts, [r["rejected"] for r in rows])
    margins = chosen - rejected  # [K, B]
    mean = margins.mean(0)
    gold = [
        (r["gold_chosen"] - r["gold_rejected"], m)
        for r, m in zip(rows, mean.tolist(), strict=True)
        if "gold_chosen" in r and r["gold_chosen"] != r["gold_rejected"]
    ]
    gold_accuracy = float(np.mean([(g > 0) == (m > 0) for g, m in gold])) if gold else float("nan")
    scores = torch.cat([chosen.mean(0), rejected.mean(0)]).numpy()
    lengths = np.array([len(r["chosen"]) for r in rows] + [len(r["rejected"]) for r in rows], float)
    correlation = (
        float(np.corrcoef(scores, lengths)[0, 1]) if lengths.std() > 0 and scores.std() > 0 else 0.0
    )
    return PairEval(
        pairs=len(rows),
        accuracy=float((mean > 0).float().mean()),
        gold_accuracy=gold_accuracy,
        margin=float(mean.mean()),
        disagreement=float(margins.std(0, unbiased=False).mean()) if len(margins) > 1 else 0.0,
        member_accuracy=(margins > 0).float().mean(1).tolist(),
        length_correlation=correlation,
    )


class RewardModel(Algorithm):
    """Train K Bradley-Terry reward models on preference pairs; export them as RUN/reward_model/."""

    config: RewardModelConfig
    saved = ("members", "optimizers", "rng")
    eval_at_end = True

    def setup(self) -> None:
        config = self.config
        self.task = make_task(config.task)
        set_threads(config.threads)
        self.device = resolve_device(config.device)  # before a base model is built there
        model_config = resolve_model(
            config.model, preference_base(config.task, config.base, config.device)
        )
        self.base_model_path = model_config.path
        self.rng = seed_everything(config.seed)  # after the base model, as start_lm does
        self.train_rows, self.test_rows = load_pairs(config.preferences, self.task, config.seed)
        self.members: list[ScalarHeadModel] = [
            build_scalar_model(model_config, seed=config.seed + k, device=self.device)
            for k in range(config.ensemble)
        ]
        self.optimizers = [
            adamw(m.parameters(), config.learning_rate, config.weight_decay) for m in self.members
        ]
        if config.model.chat_template == "auto" and has_chat_template(self.members[0].tokenizer):
            print(  # it is scored as it trains: plain text, in PPO-RLHF and best-of-N too
                "note: the reward model reads each pair as plain text, prompt + answer + EOS; "
                "the tokenizer's chat template is not applied to it (the policy trainers apply "
                "it to what the policy reads)",
                file=sys.stderr,
            )
        # Each member sees its own resample of the pairs: diversity is what makes spread mean something.
        n = len(self.train_rows)
        self.resamples = [
            np.random.default_rng([config.seed, 100 + k]).integers(n, size=n)
            if config.bootstrap and config.ensemble > 1
            else np.arange(n)
            for k in range(config.ensemble)
        ]
        # Tokenized once; each step packs its pairs (one prompt pass per pair, no padding).
        self.packed = packable(self.members[0].language_model)
        self.train_groups = encode_groups(
            self.members[0],
            [r["prompt"] for r in self.train_rows],
            [(r["chosen"], r["rejected"]) for r in self.train_rows],
        )
        backbone, test_prompts = (
            self.members[0].language_model,
            [r["prompt"] for r in self.test_rows],
        )
        check_pairs_fit(
            backbone, self.train_groups, [r["prompt"] for r in self.train_rows], "training pair"
        )
        test_groups = encode_groups(
            self.members[0], test_prompts, [(r["chosen"], r["rejected"]) for r in self.test_rows]
        )
        check_pairs_fit(backbone, test_groups, test_prompts, "held-out pair")
        self.scorer = RewardModelScorer(self.members)

    def spaces(self) -> dict[str, str]:
        return {"vocabulary": str(len(self.members[0].tokenizer))}

    # ---- learning ---------------------------------------------------------------------
    def train_step(self, k: int) -> tuple[float, float]:
        """One Bradley-Terry step of member k on a minibatch of its resample; (loss, accuracy)."""
        member, optimizer = self.members[k], self.optimizers[k]
        picks = self.resamples[k][
            self.rng.integers(len(self.resamples[k]), size=self.config.batch_size)
        ]
        if self.packed:
            scores = score_packed(member, [self.train_groups[int(i)] for i in picks])
            chosen, rejected = scores.view(-1, 2).unbind(1)  # rows are [c0, r0, c1, r1, ...]
        else:
            rows = [self.train_rows[int(i)] for i in picks]
            prompts = [r["prompt"] for r in rows]
            # chosen and rejected in one forward pass: [2B] -> two halves
            scores = member.score(
                prompts + prompts, [r["chosen"] for r in rows] + [r["rejected"] for r in rows]
            )
            chosen, rejected = scores.chunk(2)
        loss = bradley_terry_loss(chosen, rejected)
        train_step(loss, optimizer, member.parameters(), self.config.max_grad_norm)
        return loss.item(), float((chosen > rejected).float().mean())

    def train_until(self, total: int) -> None:
        """Train every member until `total` steps."""
        for member in self.members:
            member.train()
        super().train_until(total)

    def iterate(self) -> None:
        """One Bradley-Terry step of every member."""
        config = self.config
        started = time.time()
        results = [self.train_step(k) for k in range(len(self.members))]
        self.step += 1
        self._record = {
            "train/loss": float(np.mean([r[0] for r in results])),
            "train/accuracy": float(np.mean([r[1] for r in results])),
            "perf/pairs_per_s": config.batch_size
            * len(self.members)
            / max(time.time() - started, 1e-9),
        }

    def progress_postfix(self) -> dict[str, Any]:
        return {"loss": self._record["train/loss"]}

    def evaluate_now(self) -> None:
        self._log_eval()

    def _log_eval(self) -> PairEval:
        result = self.evaluate()
        self.log(
            self.step,
            **{
                "eval/accuracy": result.accuracy,
                **(
                    {}
                    if math.isnan(result.gold_accuracy)
                    else {"eval/gold_accuracy": result.gold_accuracy}
                ),
                "eval/margin": result.margin,
                "eval/disagreement": result.disagreement,
                "eval/length_correlation": result.length_correlation,
            },
        )
        return result

    def evaluate(self, episodes: int = 0, seed: int | None = None) -> PairEval:
        """Pairwise accuracy on the held-out pairs (the first `episodes` of them; 0 = all)."""
        rows = self.test_rows[:episodes] if episodes else self.test_rows
        return evaluate_pairs(self.scorer, rows)

    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """Ensemble-mean score of a (prompt, completion) pair or a list of them."""
        pairs = [observation] if isinstance(observation, tuple) else list(observation)
        scores = self.scorer([p for p, _ in pairs], [c for _, c in pairs])
        return scores[0] if isinstance(observation, tuple) else scores

    def save_models(self, folder: str | Path) -> Path:
        """Write each member as folder/member_k (loads with payoff.rewards.learned.load_reward_model)."""
        folder = Path(folder)
        for k, member in enumerate(self.members):
            member.save(folder / f"member_{k}", member=k, base_model=self.base_model_path)
        return folder

    def finish(self) -> None:
        if self.run is not None:
            result = self.evaluate() if self.config.final_eval else None
            folder = self.save_models(self.run.path / "reward_model")
            self.run.write_summary(
                **(
                    {"final_eval": result.to_dict(), "final_line": result.line()}
                    if result is not None
                    else {"final_line": NO_FINAL_LM_EVALUATION}
                ),
                steps=self.step,
                reward_model_dir=str(folder),
                base_model=self.base_model_path,
            )


def proxy_preferences() -> PreferenceDataConfig:
    """The over-optimization experiments' proxy data: 1,000 pairs from a rater biased 0.6 to length."""
    return PreferenceDataConfig(bias=0.6, train_pairs=1000, test_pairs=200)


class ProxySettings(Protocol):
    """The config keys of an optimizer that trains its own proxy reward model."""

    task: TaskConfig
    proxy_preferences: PreferenceDataConfig
    proxy_steps: int
    proxy_learning_rate: float
    seed: int
    device: str


def train_proxy(model: ModelConfig, settings: ProxySettings) -> tuple[RewardModelScorer, PairEval]:
    """Fit a one-member reward model in-process (no run directory): the proxy an optimizer then exploits."""
    steps = settings.proxy_steps
    trainer = RewardModel(
        config=RewardModelConfig(
            model=model,
            task=settings.task,
            preferences=settings.proxy_preferences,
            seed=settings.seed,
            device=settings.device,
            steps=steps,
            learning_rate=settings.proxy_learning_rate,
            eval_every=0,
            log_every=steps,
            checkpoint_every=steps,
        )
    )
    trainer.learn()
    for member in trainer.members:
        member.eval().requires_grad_(False)
    return trainer.scorer, trainer.evaluate()


ALGORITHM = RewardModel
