"""DPO: Direct Preference Optimization (Rafailov et al. 2023, https://arxiv.org/abs/2305.18290).

No reward model and no sampling: the policy itself is the reward model,

    r(x, y) = beta * (log pi(y | x) - log ref(y | x)),

and Bradley-Terry on that implicit reward is the loss (see shared/preference.py, which also
has IPO). The reference never changes, so its log-probabilities of every chosen and rejected
completion are computed once in `setup` and cached; the reference model is then dropped and
each step costs one policy forward/backward over the pairs.

Logged on held-out pairs: eval/accuracy (implicit reward prefers the chosen side),
eval/margin (mean implicit-reward margin, 0 at the start by construction),
eval/logp_margin (log pi(chosen) - log pi(rejected), the policy's own preference), and
eval/gold: the gold score of the policy's greedy answers when the task has a gold scorer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from payoff.algos.reward_model import preference_base, small_base, styled_task
from payoff.algos.shared.lm import NO_FINAL_LM_EVALUATION, LMAlgorithm, LMKeys, columns_of
from payoff.algos.shared.preference import dpo_loss
from payoff.core.config import MAX_BATCH, MAX_TOKENS, in_range
from payoff.core.errors import ConfigError
from payoff.envs.tasks import Row, TaskConfig
from payoff.envs.tasks.preferences import PreferenceDataConfig, load_pairs
from payoff.models.base_model import BaseModelConfig
from payoff.models.lm import FrozenReference, check_pairs_fit
from payoff.models.lm_optim import adamw, train_step
from payoff.models.logprobs import (
    completion_logprobs,
    pack_shared_prompts,
    packable,
    packed_completion_logprobs,
    tokenize_starts,
    tokenize_unique,
)
from payoff.rollout.generation import LocalSampler, SamplingConfig, encode_prompts
from payoff.track.progress import LateProgress


def gold_prefs() -> PreferenceDataConfig:
    return PreferenceDataConfig(bias=0.0)


@dataclass
class DPOConfig(LMKeys):
    """DPO (or IPO) on preference pairs. Shared keys (seed, threads, steps, learning_rate,
    weight_decay, max_grad_norm, log/eval/checkpoint intervals in optimizer steps; eval_every
    0 = no evaluation during training, a run still gets its final one):
    payoff.algos.shared.lm.LMKeys.

    model: the policy to tune; the reference is a frozen copy of it. model.path = a local
        Hugging Face folder (your SFT model); empty = payoff's tiny Llama SFT-trained on
        `task` first (`base` says how; cached).
    task / preferences: prompts, gold scorer and pairs (JSONL or synthetic, see
        PreferenceDataConfig; DPO's default rater is unbiased, bias 0).
    beta: strength of the implicit KL leash. Small beta (0.01-0.1) lets the policy move far
        from the reference; with loss 'ipo' beta sets the target margin 1 / (2 beta), so IPO
        wants larger betas (0.1-1).
    loss: 'sigmoid' (DPO) or 'ipo'. DPO keeps pushing the margin up on separable data (it
        can drive both likelihoods down); IPO stops at its target margin.
    rpo_alpha: weight of the chosen replies' negative log-likelihood (per token, averaged
        over the batch) added to the loss: RPO (TRL's rpo_alpha; 1.0 in its paper). DPO alone
        may lower the chosen replies' likelihood along with the rejected ones', and on a
        model whose own replies differ from both (SmolLM2 answers '83 * 3 = 218.', the pairs
        show working) greedy answers then drift away from both: smollm2-dpo's greedy
        accuracy fell 0.31 -> 0.10 with 0; the NLL term holds the chosen replies up.
    batch_size: pairs per optimizer step.
    learning_rate: DPO wants a small one (1e-6..1e-5 for real models; the tiny model
        tolerates 1e-4).
    max_new_tokens: completion length for the gold evaluation.
    """

    base: BaseModelConfig = field(default_factory=small_base)
    task: TaskConfig = field(default_factory=styled_task)
    preferences: PreferenceDataConfig = field(default_factory=gold_prefs)
    beta: float = field(default=0.1, metadata=in_range(0))
    loss: Literal["sigmoid", "ipo"] = "sigmoid"
    rpo_alpha: float = field(default=0.0, metadata=in_range(0.0))
    steps: int = field(default=100, metadata=in_range(0, low_open=True))
    batch_size: int = field(default=32, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    max_new_tokens: int = field(default=24, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    log_every: int = field(default=5, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=50, metadata=in_range(0, low_open=True))

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 25}  # payoff train runs

    def validate(self) -> None:
        # beta >= 0 is core.config's range; here it divides (IPO's margin 1 / (2 beta)).
        if self.beta <= 0:
            raise ConfigError(f"config key 'beta' must be > 0, got {self.beta}")


def encode_completions(
    tokenizer: Any, prompts: Sequence[str], completions: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prompt_ids, prompt_mask) left-padded as the sampler's (`encode_prompts`) and
    (completion_ids, completion_mask) right-padded, EOS appended."""
    pad = tokenizer.pad_token_id
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    completion_rows = [
        [*row, tokenizer.eos_token_id]
        for row in tokenizer(list(completions), add_special_tokens=False)["input_ids"]
    ]
    c_width = max(len(r) for r in completion_rows)
    return (
        prompt_ids,
        prompt_mask,
        torch.tensor([r + [pad] * (c_width - len(r)) for r in completion_rows]),
        torch.tensor([[1] * len(r) + [0] * (c_width - len(r)) for r in completion_rows]),
    )


def summed_completion_logprobs(
    model: Any, tokenizer: Any, prompts: Sequence[str], completions: Sequence[str]
) -> torch.Tensor:
    """log pi(completion + EOS | prompt) summed over tokens: [B] (with gradients)."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = encode_completions(
        tokenizer, prompts, completions
    )
    out = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    return (out.logprobs * completion_mask.to(out.logprobs.device)).sum(-1)


PairTokens = tuple[list[int], list[list[int]]]  # (prompt ids, [chosen + EOS, rejected + EOS])


def encode_pairs(tokenizer: Any, rows: Sequence[Row]) -> list[PairTokens]:
    """Token ids of every row's prompt and of its chosen and rejected completions (EOS appended).

    Prompt and completion are tokenized separately, exactly as `encode_completions` does, so
    a pair is scored the same way packed or padded.
    """
    encode = lambda texts: tokenize_unique(tokenizer, list(texts))  # noqa: E731
    eos = tokenizer.eos_token_id
    prompts = tokenize_starts(tokenizer, [r["prompt"] for r in rows])
    chosen = encode(r["chosen"] for r in rows)
    rejected = encode(r["rejected"] for r in rows)
    return [(p, [[*c, eos], [*r, eos]]) for p, c, r in zip(prompts, chosen, rejected, strict=True)]


def packed_pair_logprobs(model: Any, pairs: Sequence[PairTokens], pad_id: int) -> torch.Tensor:
    """[N, 2] log pi(chosen), log pi(rejected) with gradients: each prompt runs once, no padding."""
    pack = pack_shared_prompts([p for p, _ in pairs], [c for _, c in pairs], pad_id)
    return packed_completion_logprobs(model, pack).view(-1, 2)


@torch.no_grad()
def pair_logprobs(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Row],
    batch_size: int = 64,
    pairs: Sequence[PairTokens] | None = None,
    show: bool = True,
) -> torch.Tensor:
    """[N, 2] log-probabilities of (chosen, rejected) for every row, without gradients.

    `pairs` = the rows already encoded by `encode_pairs` (skips tokenizing). Models whose
    attention cannot take a packing mask (flash attention) fall back to padded batches.
    show: False never draws the bar that a pass past 10 s gets.
    """
    packed = packable(model)
    if packed:
        pairs = encode_pairs(tokenizer, rows) if pairs is None else pairs

    def chunk_logprobs(i: int) -> torch.Tensor:
        if packed:
            assert pairs is not None
            return packed_pair_logprobs(model, pairs[i : i + batch_size], tokenizer.pad_token_id)
        prompts = [r["prompt"] for r in rows[i : i + batch_size]]
        both = summed_completion_logprobs(
            model,
            tokenizer,
            prompts + prompts,
            [r["chosen"] for r in rows[i : i + batch_size]]
            + [r["rejected"] for r in rows[i : i + batch_size]],
        )
        return torch.stack(both.chunk(2), 1)

    # a real model's pass over a few hundred pairs takes minutes: a bar once it is slow
    progress = LateProgress(len(rows), "log-probs of pairs", unit="pair", every=1, show=show)
    parts: list[torch.Tensor] = []
    try:
        for i in range(0, len(rows), batch_size):
            parts.append(chunk_logprobs(i))
            progress.tick(steps=0, finished=len(parts[-1]))
    finally:
        progress.close()
    return torch.cat(parts)
    pairs = encode_pairs(tokenizer, rows) if pairs is None else pairs
    # a real model's pass over a few hundred pairs takes minutes: a bar once it is slow
    progress = LateProgress(len(pairs), "log-probs of pairs", unit="pair", every=1, show=show)
    parts = []
    for i in range(0, len(pairs), batch_size):
        parts.append(packed_pair_logprobs(model, pairs[i : i + batch_size], tokenizer.pad_token_id))
        progress.tick(steps=0, finished=len(parts[-1]))
    progress.close()
    return torch.cat(parts)


@dataclass
class DPOEval:
    """Held-out pair metrics of a DPO policy; with the task's checker (not your own pairs),
    the greedy answers' mean score and their win rate against the base model's."""

    pairs: int
    accuracy: float
    margin: float
    logp_margin: float
    gold: float | None  # mean checker score of greedy answers to the task's test prompts
    win_rate: float | None = None  # P(better than the base's answer) + half P(as good)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        gold = f"; greedy gold score {self.gold:.3f}" if self.gold is not None else ""
        if self.win_rate is not None:
            gold += f", win rate vs the base {self.win_rate:.3f}"
        return (
            f"held-out pairs: implicit-reward accuracy {self.accuracy:.3f}, margin {self.margin:.3f}, "
            f"log p(chosen) - log p(rejected) {self.logp_margin:.2f} on {self.pairs} pairs{gold}"
        )


class DPO(LMAlgorithm):
    """DPO / IPO on preference pairs with cached reference log-probabilities."""

    config: DPOConfig
    saved = ("model", "optimizer", "rng")
    eval_at_end = True

    @property
    def eval_at_start(self) -> bool:  # type: ignore[override]
        """A fresh run evaluates once before the first step: the starting point (margin 0,
        the policy's own preferences)."""
        return self.config.eval_every > 0

    def setup(self) -> None:
        config = self.config
        self.setup_lm(preference_base(config.task, config.base, config.device))
        train_rows, test_rows = load_pairs(config.preferences, self.task, config.seed)
        # The pairs as the model reads them: through the chat template when on.
        self.train_rows = [self.templated(r) for r in train_rows]
        self.test_rows = [self.templated(r) for r in test_rows]
        # Tokenized once; each step packs its pairs (one prompt pass per pair, no padding).
        self.packed = packable(self.model)
        self.train_pairs = encode_pairs(self.tokenizer, self.train_rows)
        self.chosen_tokens = torch.tensor(  # chosen + EOS, per pair: RPO's per-token NLL
            [len(completions[0]) for _, completions in self.train_pairs],
            dtype=torch.float32,
            device=self.device,
        )
        self.test_pairs = encode_pairs(self.tokenizer, self.test_rows)
        for pairs, rows, what in (
            (self.train_pairs, self.train_rows, "training pair"),
            (self.test_pairs, self.test_rows, "held-out pair"),
        ):
            check_pairs_fit(self.model, pairs, [r["prompt"] for r in rows], what)
        # The reference is frozen, so its log-probs are a property of the data: compute once.
        with FrozenReference(self.model).model() as reference:
            self.ref_train = pair_logprobs(
                reference, self.tokenizer, self.train_rows, pairs=self.train_pairs
            )  # [N, 2]
            self.ref_test = pair_logprobs(
                reference, self.tokenizer, self.test_rows, pairs=self.test_pairs
            )
        self.optimizer = adamw(self.model.parameters(), config.learning_rate, config.weight_decay)
        self.base_scores: np.ndarray | None = None  # greedy_scores() before the first step

    def templated(self, row: Row) -> Row:
        """A pair with its prompt and both answers as the model reads them (the chat
        template's rendering when on: each answer is the assistant's turn); else `row`."""
        if not self.chat_template:
            return row
        return {
            **row,
            "prompt": self.prompt_text(row),
            "chosen": self.completion_text(row, row["chosen"]),
            "rejected": self.completion_text(row, row["rejected"]),
        }

    # ---- learning ---------------------------------------------------------------------
    def iterate(self) -> None:
        """One optimizer step on a batch of training pairs against the cached reference."""
        config = self.config
        if self.step == 0 and self.base_scores is None and (config.final_eval or config.eval_every):
            self.greedy_scores()  # the base's answers, for the win rate (once, before training)
        started = time.time()
        self.model.train()
        index = self.rng.integers(len(self.train_rows), size=config.batch_size)
        logps = self._pair_logprobs(index)  # [B, 2]
        ref = self.ref_train[torch.as_tensor(index)]
        result = dpo_loss(logps[:, 0], logps[:, 1], ref[:, 0], ref[:, 1], config.beta, config.loss)
        loss, extra = result.loss, {}
        if config.rpo_alpha > 0:  # RPO: the chosen replies' NLL per token holds them up
            nll = -(logps[:, 0] / self.chosen_tokens[torch.as_tensor(index)]).mean()
            loss = loss + config.rpo_alpha * nll
            extra["train/chosen_nll"] = nll.item()
        grad_norm = train_step(loss, self.optimizer, self.model.parameters(), config.max_grad_norm)
        self.step += 1
        self._record = {
            "train/loss": loss.item(),
            **extra,
            "train/accuracy": float(result.accuracy),
            "train/margin": float(result.margin),
            "train/chosen_reward": float(result.chosen_rewards.mean()),
            "train/rejected_reward": float(result.rejected_rewards.mean()),
            "train/grad_norm": float(grad_norm),
            "perf/pairs_per_s": config.batch_size / max(time.time() - started, 1e-9),
        }

    def progress_postfix(self) -> dict[str, Any]:
        return {"loss": self._record["train/loss"]}

    def evaluate_now(self) -> None:
        self._log_eval()

    def _pair_logprobs(self, index: np.ndarray) -> torch.Tensor:
        """[B, 2] policy log-probs of the training pairs at `index`, with gradients."""
        if self.packed:
            pairs = [self.train_pairs[int(i)] for i in index]
            return packed_pair_logprobs(self.model, pairs, self.tokenizer.pad_token_id)
        rows = [self.train_rows[int(i)] for i in index]
        prompts = [r["prompt"] for r in rows]
        logps = summed_completion_logprobs(
            self.model,
            self.tokenizer,
            prompts + prompts,
            [r["chosen"] for r in rows] + [r["rejected"] for r in rows],
        )
        return torch.stack(logps.chunk(2), 1)

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """Trained on your own pairs: the held-out pairs' metrics (the built-in task's
        problems say nothing about them). Otherwise, as every language-model run
        (LMAlgorithm.evaluate): greedy accuracy and pass@k on a held-out split."""
        if self.config.preferences.own:
            given = sorted(kwargs)  # (the first positional is the episode count, unused)
            if given:
                raise ConfigError(
                    f"this DPO run trained on your own pairs and is evaluated on their held-out "
                    f"pairs (implicit-reward accuracy and margins); "
                    f"{', '.join('--' + k for k in given)} apply to a task's problems"
                )
            return self.evaluate_pairs(with_gold=False)
        return super().evaluate(*args, **kwargs)

    def evaluate_pairs(self, with_gold: bool = True) -> DPOEval:  # noqa: D401
        """Implicit-reward accuracy and margins on the held-out pairs; greedy gold score and
        win rate against the base model."""
        self.model.eval()
        logps = pair_logprobs(
            self.model,
            self.tokenizer,
            self.test_rows,
            pairs=self.test_pairs,
            show=self.loop_options.get("progress_bar", True),
        )
        h = (logps[:, 0] - self.ref_test[:, 0]) - (logps[:, 1] - self.ref_test[:, 1])
        scores = self.greedy_scores() if with_gold else None
        win_rate = None
        if scores is not None and self.base_scores is not None:
            win_rate = float(
                np.mean((scores > self.base_scores) + 0.5 * (scores == self.base_scores))
            )
        return DPOEval(
            pairs=len(self.test_rows),
            accuracy=float((h > 0).float().mean()),
            margin=float(self.config.beta * h.mean()),
            logp_margin=float((logps[:, 0] - logps[:, 1]).mean()),
            gold=None if scores is None else float(scores.mean()),
            win_rate=win_rate,
        )

    def greedy_scores(self) -> np.ndarray | None:
        """Per-problem scores of greedy answers to the task's test prompts under its checker
        (gold for styled_addition, correctness for arithmetic); None for your own pairs,
        whose prompts the task's checker knows nothing of. Before the first step these are
        the base model's, kept for the win rate."""
        if self.config.preferences.own or self.verifier is None:
            return None
        rows = self.task.split("test", self.config.task.eval_size)
        sampling = SamplingConfig(temperature=0.0, max_new_tokens=self.config.max_new_tokens)
        completions = (
            LocalSampler(self.model, self.tokenizer)
            .generate([self.prompt_text(r) for r in rows], sampling)
            .completions
        )
        scored = self.verifier([r["prompt"] for r in rows], completions, **columns_of(rows)).total
        scores = np.asarray(scored, dtype=np.float64)
        if self.step == 0 and self.base_scores is None:
            self.base_scores = scores
        return scores

    def _log_eval(self) -> DPOEval:
        result = self.evaluate_pairs()
        self._last_pairs_eval = (self.step, result)  # finish() at this step reuses it
        metrics = {
            "eval/accuracy": result.accuracy,
            "eval/margin": result.margin,
            "eval/logp_margin": result.logp_margin,
        }
        if result.gold is not None:
            metrics["eval/gold"] = result.gold
        if result.win_rate is not None:
            metrics["eval/win_rate"] = result.win_rate
        self.log(self.step, **metrics)
        return result

    def finish(self) -> None:
        if self.run is not None:
            memo = getattr(self, "_last_pairs_eval", None)
            result = (
                (memo[1] if memo is not None and memo[0] == self.step else self.evaluate_pairs())
                if self.config.final_eval
                else None
            )
            self.export_model()
            self.run.write_summary(
                **(
                    {"final_eval": result.to_dict(), "final_line": result.line()}
                    if result is not None
                    else {"final_line": NO_FINAL_LM_EVALUATION}
                ),
                steps=self.step,
                model_dir=str(self.run.path / "model"),
                base_model=self.base_model_path,
            )

    # ---- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # The cached reference log-probs are rebuilt from the unchanged reference on load.
        return {
            **super().state_dict(),
            "ref_train": self.ref_train.to("cpu", copy=True),
            "ref_test": self.ref_test.to("cpu", copy=True),
            "base_scores": None if self.base_scores is None else self.base_scores.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.ref_train = state["ref_train"].to(self.device)
        self.ref_test = state["ref_test"].to(self.device)
        base = state.get("base_scores")  # absent from checkpoints older than the win rate
        self.base_scores = None if base is None else np.asarray(base, dtype=np.float64)


ALGORITHM = DPO
