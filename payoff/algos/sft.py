"""Supervised fine-tuning (and pretraining) of a causal LM: next-token cross-entropy.

    rows {"prompt", "answer"} --> text = prompt + answer + EOS
                                   (a row's "demonstration", when it has one, in place of
                                    its answer: the worked reply whose end the answer is)
    loss = mean over answer tokens of -log p(token | everything before it)     (loss_on=completion)
        or mean over every token                                              (loss_on=all)

With an empty model.path it starts from payoff's freshly initialised tiny Llama: that is
how `payoff train tiny-lm-pretrain` makes the "base model" that GRPO later sharpens
(`build_base_model`). `train_on_episodes` is the same loss on the model's turns of
multi-turn episodes: how the tool-using agent learns the call format from demonstrations.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from payoff.algos.base import NO_FINAL_EVALUATION
from payoff.algos.shared.lm import NO_FINAL_LM_EVALUATION, LMAlgorithm, LMKeys
from payoff.core.cache import build_lock, cache_folder
from payoff.core.config import MAX_BATCH, MAX_TOKENS, in_range, to_dict
from payoff.core.errors import ConfigError, DataError
from payoff.envs.tasks import Row, TaskConfig, data_fingerprint
from payoff.models.base_model import BaseModelConfig, save_cached_model
from payoff.models.lean_forward import explained_lookups
from payoff.models.lm import ModelConfig, context_limit, model_device
from payoff.models.lm_optim import adamw, scheduled_lr, train_step, warmup_scheduler
from payoff.models.logprobs import sequence_logprobs, tokenize_starts
from payoff.rollout.episodes import Episode, pack_episodes
from payoff.track.progress import Progress


@dataclass
class SFTConfig(LMKeys):
    """Supervised fine-tuning on prompt/answer pairs. Shared keys (model, task, seed,
    threads, steps, learning_rate, weight_decay, max_grad_norm, log/eval/checkpoint
    intervals in optimizer steps): payoff.algos.shared.lm.LMKeys.

    batch_size: rows per optimizer step.
    warmup_steps: linear learning-rate warmup, then constant.
    loss_on: 'completion' masks the prompt out of the loss (the usual SFT); 'all' is plain
        language modelling of the whole text. On random-digit prompts 'all' spends capacity
        predicting unpredictable digits and learns the answers more slowly.
    answer_noise: fraction of training rows whose answer is swapped for another row's answer
        (wrong, but plausible-looking): a stand-in for noisy pretraining text. A model trained
        this way knows the right answer but spreads probability over wrong ones, which is the
        situation RL with a verifier sharpens. Evaluation always uses the true answers.
    stop_at_accuracy: stop as soon as greedy accuracy on `task.eval_size` fixed problems from
        the training distribution (split 'train', never the held-out test split) reaches this;
        checked every eval_every steps, with `steps` as the cap. A model that learns in a
        sudden jump (as the tiny model does arithmetic) lands on the jump at a different
        step on every kind of CPU (the float rounding of its kernels differs); stopping at an
        accuracy instead of a step count gives RL the same starting point everywhere.
    max_new_tokens: completion length for evaluation.
    held_out_curve: score the held-out test split every eval_every steps (the eval/accuracy
        curve). false: each check runs only stop_at_accuracy's probe on training problems,
        and the test split is scored once, at the end. build_base_model runs this way: a
        cached base model has no curve to show, and the test scores cost as much as the
        probes (on a code task every answer runs in the sandbox).
    """

    steps: int = field(default=300, metadata=in_range(0, low_open=True))
    batch_size: int = field(default=128, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    learning_rate: float = field(default=1e-3, metadata=in_range(0, low_open=True))
    warmup_steps: int = field(default=20, metadata=in_range(0))
    loss_on: Literal["completion", "all"] = "completion"
    answer_noise: float = field(default=0.0, metadata=in_range(0, 1, high_open=True))
    stop_at_accuracy: float | None = field(default=None, metadata=in_range(0, 1))
    max_new_tokens: int = field(default=8, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    log_every: int = field(default=10, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=100, metadata=in_range(0, low_open=True))
    held_out_curve: bool = True

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 100}  # payoff train runs

    def validate(self) -> None:
        # Ranges of single keys (steps > 0, answer_noise in [0, 1), ...) are checked by
        # core.config; an accuracy of 0 would stop before training.
        if self.stop_at_accuracy is not None and self.stop_at_accuracy <= 0.0:
            raise ConfigError(
                f"config key 'stop_at_accuracy' must be in (0, 1] or null, "
                f"got {self.stop_at_accuracy}"
            )


def demonstration(row: Row) -> str:
    """What SFT teaches for `row`: its worked `demonstration` when the task gives one
    (arithmetic's show_working), else its answer; accuracy checks the answer either way."""
    return str(row.get("demonstration") or row["answer"])


class SFT(LMAlgorithm):
    """Supervised fine-tuning / pretraining of a causal LM with the loss on the answer."""

    config: SFTConfig
    samples_from_prompts = False  # 'text' rows (an empty prompt) are plain language modelling
    keeps_dropout = True  # supervised training keeps the model's dropout, as TRL's SFT
    saved = ("model", "optimizer", "scheduler", "best_accuracy", "rng")
    eval_at_end = True

    @property
    def eval_at_start(self) -> bool:  # type: ignore[override]
        """Fine-tuning a model you name (model.path): where it starts, on the run's curve. A
        model payoff initialises from scratch has nothing to show there."""
        return self.run is not None and self.config.eval_every > 0 and bool(self.config.model.path)

    def setup(self) -> None:
        self.setup_lm()
        self.held_out_scorable()  # an empty test split: said now, not after training
        config = self.config
        self.optimizer = adamw(self.model.parameters(), config.learning_rate, config.weight_decay)
        self.scheduler = warmup_scheduler(self.optimizer, config.warmup_steps)
        self.best_accuracy = 0.0
        self.final_result: Any = None  # finish()'s held-out score (build_base_model reports it)

    def check_context(self, most: int = 5_000) -> None:
        """The prompts plus max_new_tokens (LMAlgorithm's check), and what SFT itself trains
        on: each training row's prompt, answer and EOS must fit the model's context too (one
        answer or 'text' row past it would fail deep inside the model, or ask a rotary model
        for positions it never learnt). Checks up to `most` rows and names the longest."""
        super().check_context(most)
        context = context_limit(self.model)
        rows = (getattr(self.task, "train_rows", None) or [])[:most]
        if context is None or not rows:
            return
        limit, fits = context
        tokenizer = self.tokenizer
        prompts = tokenize_starts(tokenizer, [self.prompt_text(r) for r in rows])
        answers = tokenizer(
            [self.completion_text(r, demonstration(r)) for r in rows], add_special_tokens=False
        )
        lengths = [len(p) + len(a) + 1 for p, a in zip(prompts, answers["input_ids"], strict=True)]
        at = int(np.argmax(lengths))
        if lengths[at] <= limit:
            return
        row = rows[at]
        shown = str(row["prompt"] or row["answer"])[:40]
        over = sum(n > limit for n in lengths)
        raise ConfigError(
            f"a training row of task {self.config.task.name!r} ({shown!r}...) is "
            f"{lengths[at]} tokens (prompt, answer and EOS), past the {limit} positions this "
            f"model ({getattr(self.model.config, 'model_type', '?')}) {fits}; {over} of the "
            f"{len(rows)} rows checked are that long. Shorten or drop them, or use a model "
            f"with a longer context"
        )

    # ---- data -------------------------------------------------------------------------
    def batch(self, rows: list[Row]) -> dict[str, torch.Tensor]:
        """Right-padded input ids, attention mask and labels (-100 = no loss) for `rows`, on
        the model's device."""
        tokenizer = self.tokenizer
        targets = [demonstration(r) for r in rows]
        if self.config.answer_noise > 0:
            noisy = self.rng.random(len(rows)) < self.config.answer_noise
            donors = self.rng.permutation(len(rows))
            targets = [
                targets[d] if n else t for t, n, d in zip(targets, noisy, donors, strict=True)
            ]
        # Through the chat template when on: the answer is the assistant's turn.
        prompts = tokenize_starts(tokenizer, [self.prompt_text(r) for r in rows])  # BOS first
        answers = tokenizer(
            [self.completion_text(r, t) for r, t in zip(rows, targets, strict=True)],
            add_special_tokens=False,
        )["input_ids"]
        sequences, labels = [], []
        for prompt, answer in zip(prompts, answers, strict=True):
            answer = [*answer, tokenizer.eos_token_id]  # the model must learn to stop
            sequences.append(prompt + answer)
            masked = [-100] * len(prompt) if self.config.loss_on == "completion" else prompt
            labels.append(masked + answer)
        width = max(len(s) for s in sequences)
        pad = tokenizer.pad_token_id
        on = {"device": self.device}
        return {
            "input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in sequences], **on),
            "attention_mask": torch.tensor(
                [[1] * len(s) + [0] * (width - len(s)) for s in sequences], **on
            ),
            "labels": torch.tensor([s + [-100] * (width - len(s)) for s in labels], **on),
        }

    # ---- learning ---------------------------------------------------------------------
    def train_until(self, total: int) -> None:
        """Train until `total` optimizer steps, or stop_at_accuracy."""
        self.model.train()
        super().train_until(total)

    @property
    def stopped_at(self) -> int | None:
        """The step at which stop_at_accuracy was reached (None: not reached)."""
        return self.solved_at

    def iterate(self) -> None:
        """One optimizer step on a fresh batch."""
        config = self.config
        started = time.time()
        batch = self.batch(self.task.sample(self.rng, config.batch_size))
        with explained_lookups(self.model, batch["input_ids"]):
            loss = self.model(**batch, use_cache=False).loss
        grad_norm = train_step(
            loss, self.optimizer, self.model.parameters(), config.max_grad_norm, self.scheduler
        )
        self.step += 1
        tokens = int(batch["attention_mask"].sum())
        self._record = {
            "train/loss": loss.item(),
            "train/grad_norm": float(grad_norm),
            "train/learning_rate": self.scheduler.get_last_lr()[0],
            "perf/tokens_per_s": tokens / max(time.time() - started, 1e-9),
        }

    def progress_postfix(self) -> dict[str, Any]:
        return {"loss": self._record["train/loss"]}

    def held_out_scorable(self) -> bool:
        """Whether the test split has prompts to answer: plain 'text' rows (TRL's SFT format)
        train, but there is nothing to score a greedy answer against; a dataset too small to
        hold any rows out (10% by a hash of each row's key) trains without a held-out score,
        as TRL's SFTTrainer does without an eval_dataset, and says so once."""
        if not hasattr(self, "_scorable"):
            self._scorable, self._unscored = False, ""
            if not self.task.has_split("test"):
                self._unscored = (
                    f"no held-out rows in task {self.config.task.name!r} (the test split is "
                    f"empty: pass task.test_data=<file or folder>), so no held-out accuracy"
                )
                print(f"note: SFT: {self._unscored}", file=sys.stderr)
                return False
            try:
                self.task.split("test", 1)
                self._scorable = True
            except DataError:  # text rows: nothing to answer
                self._unscored = "text rows (no prompts to score)"
        return self._scorable

    def evaluate_now(self) -> None:
        """Held-out accuracy; with stop_at_accuracy, stop once the training problems are answered."""
        if not self.held_out_scorable():
            return  # text rows: nothing to answer (train/loss is the curve)
        if self.config.held_out_curve:
            result = self.evaluate(self.config.task.eval_size, split="test", k=())
            self.best_accuracy = max(self.best_accuracy, result.accuracy)
            self.log(self.step, **{"eval/accuracy": result.accuracy})
        if self._reached_target():
            self.solved_at = self.step

    def _reached_target(self) -> bool:
        """True once training-distribution accuracy reaches config.stop_at_accuracy (logged)."""
        target = self.config.stop_at_accuracy
        if target is None:
            return False
        probe = self.evaluate(self.config.task.eval_size, split="train", k=())
        self.log(self.step, **{"eval/train_accuracy": probe.accuracy})
        return probe.accuracy >= target

    def finish(self) -> None:
        scorable = self.held_out_scorable()  # text rows: nothing to answer
        asked = self.config.final_eval
        result = (
            self.final_evaluation(self.config.task.eval_size, split="test")
            if scorable and asked
            else None
        )
        self.final_result = result
        self.export_model()
        if self.run is not None:
            final = (
                {"final_eval": result.to_dict(), "final_line": result.line()}
                if result
                else {
                    # "no final evaluation" first: the CLI prints such a line as it is
                    "final_line": (
                        NO_FINAL_LM_EVALUATION
                        if scorable
                        else NO_FINAL_EVALUATION.format(self._unscored)
                    )
                    + f"; trained {self.step} steps"
                }
            )
            self.run.write_summary(
                **final,
                steps=self.step,
                stopped_at_accuracy=self.stopped_at,
                model_dir=str(self.run.path / "model"),
            )


# ---- the base model that RL starts from -------------------------------------------------
def build_base_model(
    task: TaskConfig, base: BaseModelConfig, max_new_tokens: int = 8, device: str = "auto"
) -> Path:
    """Path of a Hugging Face folder with the pretrained tiny base model, training it if not cached.

    device: where it trains when it is not cached (the RL run's own device key). Not part of
    the cache key: the same settings make the same model wherever they ran.
    """
    if base.task_options:  # pretrain on a variant of the RL run's task
        task = dataclasses.replace(task, options={**task.options, **base.task_options})
    config = SFTConfig(
        device=device,
        model=ModelConfig(tiny=base.tiny),
        task=task,
        seed=base.seed,
        steps=base.steps,
        batch_size=base.batch_size,
        learning_rate=base.learning_rate,
        loss_on=base.loss_on,
        answer_noise=base.answer_noise,
        stop_at_accuracy=base.stop_at_accuracy,
        max_new_tokens=max_new_tokens,
        eval_every=base.steps if base.stop_at_accuracy is None else base.check_every,
        log_every=base.steps,
        checkpoint_every=base.steps,
        held_out_curve=False,
    )
    # None of these keys changes the model (held_out_curve only drops greedy evaluations,
    # and final_eval off leaves the test score to below), so none is part of the cache key.
    unchanging = ("device", "held_out_curve", "final_eval")
    settings = {k: v for k, v in to_dict(config).items() if k not in unchanging}
    key = {**settings, "rows": data_fingerprint(task)}  # rows passed from Python
    path = cache_folder("base-models", task.name, key if key["rows"] else settings)
    if (path / "config.json").is_file():
        print(f"base model: {path} (cached)", file=sys.stderr)
        return path
    with build_lock(path):  # another process building the same model: wait, then reuse it
        if (path / "config.json").is_file():
            print(f"base model: {path} (cached, built while this run waited)", file=sys.stderr)
            return path
        print(
            f"base model: none given (model.path is empty), so pretraining payoff's tiny Llama "
            f"with SFT on {task.name} for {base.steps} steps into {path} (once; later runs "
            "reuse it)",
            file=sys.stderr,
        )
        sft = SFT(config=config)
        sft.learn()
        if sft.interrupted:  # Ctrl-C: a half-trained base must not be cached for later runs
            raise KeyboardInterrupt
        result = sft.final_result
        if result is None:  # text rows have no test split to score
            result = sft.evaluate(task.eval_size, split="test", k=())
        notes = {"sft": to_dict(config), "test": result.to_dict()}
        save_cached_model(sft.model, sft.tokenizer, path, notes)
    stopped = "" if sft.stopped_at is None else f" (stopped at step {sft.stopped_at})"
    print(f"base model: greedy test accuracy {result.accuracy:.3f}{stopped}", file=sys.stderr)
    return path


# ---- SFT on episodes: the model's own turns of multi-turn conversations -------------------
def train_on_episodes(
    model: Any,
    tokenizer: Any,
    episodes: Sequence[Episode],
    steps: int,
    batch_size: int,
    learning_rate: float,
    rng: np.random.Generator,
) -> list[float]:
    """SFT on the model's turns of `episodes` (e.g. scripted demonstrations); returns the losses.

    loss = mean over the model's tokens of -log p(token | everything before it); the prompt,
    tool results and template text are context, never targets. AdamW with 20 steps of
    warmup, then a cosine down to 10% of `learning_rate` at `steps`.
    """
    optimizer = adamw(model.parameters(), learning_rate)
    losses: list[float] = []
    model.train()
    progress = Progress(steps, desc="SFT on demonstrations")  # minutes on a real model
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(step, learning_rate, warmup_steps=20, total_steps=steps)
        picks = rng.integers(0, len(episodes), batch_size)
        batch = pack_episodes(
            [episodes[i] for i in picks], tokenizer.pad_token_id, model_device(model)
        )
        logprobs = sequence_logprobs(model, batch.input_ids, batch.attention_mask)  # [B, L-1]
        mask = batch.model_mask[:, 1:].float()
        loss = -(logprobs * mask).sum() / mask.sum()
        train_step(loss, optimizer, model.parameters(), 1.0)
        losses.append(loss.item())
        progress.update(1, loss=losses[-1])
    progress.close()
    return losses


ALGORITHM = SFT
