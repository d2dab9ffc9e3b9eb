"""What the language-model algorithms share: the model stack, evaluation with pass@k, export."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from payoff.algos.base import NO_FINAL_EVALUATION, Algorithm, RunKeys
from payoff.core.config import in_range
from payoff.core.device import check_device_name
from payoff.core.errors import ConfigError, PayoffError
from payoff.envs.tasks import Row, Task, TaskConfig, make_task
from payoff.envs.tasks.datasets import messages, render_chat
from payoff.models.base_model import start_lm
from payoff.models.chat import completion_text, prompt_text, uses_chat_template
from payoff.models.lm import ModelConfig, context_limit, save_lm
from payoff.models.logprobs import tokenize_starts
from payoff.rewards.base import RewardMix, RewardSpec
from payoff.rollout.generation import LocalSampler, SamplingConfig

#: summary.json's final_line of an LM run with final_eval off
NO_FINAL_LM_EVALUATION = NO_FINAL_EVALUATION.format("final_eval=false")


@dataclass
class LMKeys(RunKeys):
    """RunKeys plus what the language-model trainers share (SFT, GRPO, DPO, the reward
    model, PPO-RLHF); the intervals count optimizer steps (GRPO, PPO-RLHF: rollout batches).

    model: the model trained. model.path = a local Hugging Face folder; empty = payoff's
        tiny Llama (see payoff.models.lm.ModelConfig: dtype, autocast, gradient
        checkpointing, chat_template, LoRA, ...).
    task: problems, prompts and held-out splits (task.name and task.options, or your own
        data with task.name=jsonl and task.data=FILE; see payoff.envs.tasks.TaskConfig).
    steps: training length (optimizer steps, or rollout batches for the RL trainers).
    learning_rate / weight_decay: AdamW. 1e-3 suits the tiny model from scratch; a
        pretrained model wants ~1e-5.
    max_grad_norm: clip the global gradient norm to this (0 = off).
    device: auto | cpu | cuda | cuda:N | mps (payoff.core.device); auto = a GPU when torch
        sees one. The model, its reference, critic and reward model live there; metrics come
        back as Python numbers and checkpoints hold CPU tensors, so a run resumes on any device.
    eval_every / final_eval: the held-out evaluations: every eval_every steps (0: none during
        training) and once at the end (summary.json's final_eval). Both are off for a
        trainer made in Python, so learn(n) generates nothing beyond what training needs
        (trainer.evaluate() measures it when you ask); `payoff train` runs turn them on
        (run_defaults: final_eval true and each trainer's eval_every).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    device: str = field(default="auto", metadata={"check": check_device_name})
    steps: int = field(default=200, metadata=in_range(0, low_open=True))
    learning_rate: float = field(default=1e-4, metadata=in_range(0, low_open=True))
    weight_decay: float = field(default=0.0, metadata=in_range(0))
    max_grad_norm: float = field(default=1.0, metadata=in_range(0))
    final_eval: bool = False

    run_defaults: ClassVar[dict[str, Any]] = {"final_eval": True}  # payoff train runs


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased pass@k from n samples of which `correct` passed (Chen et al. 2021, eq. 1)."""
    if n - correct < k:
        return 1.0
    return 1.0 - math.prod((n - correct - i) / (n - i) for i in range(k))


@dataclass
class LMEvalResult:
    """Held-out evaluation of a language model on a task split.

    accuracy: greedy decoding (temperature 0), one completion per problem; None for
        prompt-only rows, which have no answer to be right about.
    mean_reward: the greedy completions' mean score by what evaluated them (the verifier;
        for prompt-only rows, the run's rewards).
    pass_at: {k: pass@k} from `samples` completions per problem at `temperature`; pass@1
        is the sampled accuracy, pass@8 whether any of 8 tries is right.
    """

    split: str
    problems: int
    accuracy: float | None
    mean_length: float
    mean_reward: float = 0.0
    pass_at: dict[int, float] = field(default_factory=dict)
    samples: int = 0
    temperature: float = 1.0
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def score(self) -> float:
        """The headline: accuracy, or the mean reward where there is none (prompt-only rows)."""
        return self.accuracy if self.accuracy is not None else self.mean_reward

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        for k, v in self.pass_at.items():
            data[f"pass@{k}"] = v
        return data

    def line(self) -> str:
        if self.accuracy is None:
            text = (
                f"{self.split}: greedy mean reward {self.mean_reward:.3f} on {self.problems} "
                f"prompts (prompt-only rows: scored by the run's rewards, no accuracy)"
            )
        else:
            text = f"{self.split}: greedy accuracy {self.accuracy:.3f} on {self.problems} problems"
        if self.pass_at:
            passes = ", ".join(f"pass@{k} {v:.3f}" for k, v in sorted(self.pass_at.items()))
            text += (
                f"; {passes} ({self.samples} samples/problem at temperature {self.temperature:g})"
            )
        return text + f"; mean completion length {self.mean_length:.1f} tokens"


def correctness_spec(task: Task) -> RewardSpec:
    """The verifier that decides 'correct' for accuracy: the task's first default reward."""
    return RewardSpec(name=task.default_rewards[0], label="correct")


def columns_of(rows: Sequence[Row]) -> dict[str, list[Any]]:
    """Dataset columns (everything but the prompt) as lists, the way reward functions get them:
    every column any row has (None where a row lacks it: chat and plain rows can mix)."""
    keys = list(dict.fromkeys(k for row in rows for k in row if k != "prompt"))
    return {k: [row.get(k) for row in rows] for k in keys}


SHOWN_PROMPT_CHARS = 1_500  # of the example prompt in summary.json and the report
SHOWN_EXAMPLE_PROMPT_CHARS = 500  # of each evaluation example's model_input
CONSOLE_PROMPT_CHARS = 240  # of the example prompt in the console line


def shown_text(text: str, limit: int) -> str:
    """`text` within `limit` characters: its start and its end (where a chat template puts
    the last turn and the assistant's header), with a marker saying how much is left out."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    return f"{text[:head]}[… {len(text) - limit:,} characters left out …]{text[-tail:]}"


def model_input(tokenizer: Any, text: str) -> tuple[str, int]:
    """A prompt as the model is given it: decoded from the token ids it is fed (the BOS the
    tokenizer puts first and the template's special tokens written out), and their count."""
    ids = tokenize_starts(tokenizer, [text])[0]
    return tokenizer.decode(ids, skip_special_tokens=False), len(ids)


@torch.no_grad()
def evaluate_lm(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Row],
    verifier: RewardMix,
    max_new_tokens: int,
    stop: list[str] | None = None,
    k: Sequence[int] = (),
    temperature: float = 1.0,
    seed: int = 0,
    examples: int = 5,
    chat_template: bool = False,
    accuracy: bool = True,
) -> LMEvalResult:
    """Greedy accuracy, and pass@k for each k from max(k) samples per problem.

    chat_template: the model reads each row's prompt through the tokenizer's chat template
    (payoff.models.chat); the verifier always gets the row's own prompt. The examples then
    carry `model_input` too: the prompt as the model read it (bounded).
    accuracy: False for prompt-only rows: `verifier` is then the run's rewards, whose mean
    on the greedy completions is the result (no accuracy, and no pass@k: nothing is right).
    """
    if not rows:
        raise ConfigError("no problems to evaluate on")
    sampler = LocalSampler(model, tokenizer)
    prompts = [row["prompt"] for row in rows]
    greedy = sampler.generate(
        [prompt_text(tokenizer, row, chat_template) for row in rows],
        SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens, stop=stop or []),
    )
    scores = verifier(prompts, greedy.completions, **columns_of(rows)).total
    correct = [s >= 1.0 for s in scores]
    shown = [
        {"prompt": p, "completion": c, "answer": row.get("answer"), "correct": ok}
        if accuracy
        else {"prompt": p, "completion": c, "reward": score}
        for p, c, row, ok, score in list(
            zip(prompts, greedy.completions, rows, correct, scores, strict=True)
        )[:examples]
    ]
    if chat_template:  # the row's prompt is what the verifier read; this, what the model did
        for i, row in enumerate(rows[: len(shown)]):
            text, _ = model_input(tokenizer, prompt_text(tokenizer, row, True))
            first, *rest = shown[i].items()  # model_input next to the prompt
            shown[i] = dict(
                [first, ("model_input", shown_text(text, SHOWN_EXAMPLE_PROMPT_CHARS)), *rest]
            )
    result = LMEvalResult(
        split="",
        problems=len(rows),
        accuracy=float(np.mean(correct)) if accuracy else None,
        mean_length=float(greedy.lengths.float().mean()),
        mean_reward=float(np.mean(scores)),
        examples=shown,
    )
    ks = sorted({int(x) for x in k}) if accuracy else []
    if ks:
        if ks[0] < 1:
            raise ConfigError(f"k for pass@k must be >= 1, got {ks}")
        n = max(ks)
        repeated = [row for row in rows for _ in range(n)]
        generator = torch.Generator().manual_seed(seed)
        sampled = sampler.generate(
            [prompt_text(tokenizer, row, chat_template) for row in repeated],
            SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, stop=stop or []),
            generator,
        )
        totals = verifier(
            [row["prompt"] for row in repeated], sampled.completions, **columns_of(repeated)
        ).total
        per_problem = np.asarray([t >= 1.0 for t in totals]).reshape(len(rows), n).sum(1)
        result.pass_at = {
            kk: float(np.mean([pass_at_k(n, int(c), kk) for c in per_problem])) for kk in ks
        }
        result.samples = n
        result.temperature = temperature
    return result


class LMAlgorithm(Algorithm):
    """A trainable language model: the model stack, generation (`predict`), evaluation on
    task splits (greedy accuracy and pass@k), HF export. It acts in no environment, so it
    has no episodes to render."""

    model: Any
    tokenizer: Any
    task: Task
    verifier: RewardMix | None  # None: prompt-only data, nothing to check answers against
    rng: np.random.Generator
    base_model_path: str
    device: torch.device
    chat_template: bool

    samples_from_prompts = True  # RL trainers generate from the rows' prompts (SFT does not)
    keeps_dropout = False  # model.disable_dropout null: the model's dropout off (SFT: kept)

    def setup_lm(self, build_base: Callable[[], Path] | None = None) -> ModelConfig:
        """The stack every LM trainer starts from; returns the model config with its folder.

        Sets self.task (config.task) and self.verifier (its correctness check, what accuracy
        counts; None for prompt-only rows, which the run's rewards alone score), then, as `payoff.models.base_model.start_lm`: threads, self.device
        (config.device), the model's folder (`build_base()` builds or finds the base model
        when config.model has no path), self.rng, self.model and self.tokenizer;
        self.base_model_path, and self.chat_template (whether prompts go through the
        tokenizer's chat template: model.chat_template auto and the tokenizer has one).
        """
        config = self.config
        self.task = make_task(config.task)
        if self.samples_from_prompts:
            unprompted = [r for r in getattr(self.task, "train_rows", []) if not r["prompt"]]
            if unprompted:
                raise ConfigError(
                    f"{self.name} samples completions of prompts, but {len(unprompted)} training "
                    f"rows of task {config.task.name!r} have none (language-modelling 'text' "
                    f"rows are for SFT); give the rows a prompt (and an answer or tests)"
                )
            self.task.split("test", 1)  # no held-out rows: say so now, not after pretraining
        if not self.task.has_references:
            self.refuse_prompt_only()
        self.verifier = (
            RewardMix([correctness_spec(self.task)]) if self.task.has_references else None
        )
        model = config.model
        if model.disable_dropout is None:
            model = replace(model, disable_dropout=not self.keeps_dropout)
        start = start_lm(model, config.seed, config.threads, build_base, config.device)
        self.rng, self.model, self.tokenizer = start.rng, start.model, start.tokenizer
        self.device = start.device
        self.base_model_path = start.model_config.path
        self.chat_template = uses_chat_template(self.tokenizer, config.model.chat_template)
        self.check_context()
        return start.model_config

    def data_digest(self) -> str | None:
        """A digest of the rows of the user's own data (train and held-out splits), kept in
        checkpoints so that a resume notices the file changed under it; None for generated
        tasks, whose rows come from the seed."""
        if not hasattr(self, "_data_digest"):  # the rows are read once per process
            splits = [getattr(self.task, name, None) for name in ("train_rows", "test_rows")]
            text = json.dumps([s or [] for s in splits], sort_keys=True, default=str)
            self._data_digest = hashlib.sha1(text.encode()).hexdigest() if any(splits) else None
        return self._data_digest

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        digest = self.data_digest()
        if digest is not None:
            state["data_digest"] = digest
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved, now = state.get("data_digest"), self.data_digest()
        if saved is not None and now is not None and saved != now:
            rows = len(getattr(self.task, "train_rows", None) or [])
            held = len(getattr(self.task, "test_rows", None) or [])
            warnings.warn(
                f"the rows of task {self.config.task.name!r} are not the ones this checkpoint "
                f"trained on (the data file changed since: now {rows} training and {held} "
                f"held-out rows); training goes on with the new rows and held-out scores from "
                f"here on are on the new held-out split",
                RuntimeWarning,
                stacklevel=2,
            )

    def refuse_prompt_only(self) -> None:
        """Prompt-only rows (no answer, no tests) need rewards that score without a reference
        and a model of the user's own: payoff's tiny base model learns the rows' answers first."""
        config = self.config
        first = next(iter(getattr(self.task, "train_rows", None) or []), {})
        pairs = (
            " These rows hold 'chosen' and 'rejected': preference pairs go in preferences= "
            "(preferences.path=FILE), which DPO and reward models train on; task= is what "
            "they are evaluated on."
            if "chosen" in first and "rejected" in first
            else ""
        )
        if not self.samples_from_prompts:
            raise ConfigError(
                f"{self.name} learns each row's answer, but the rows of task {config.task.name!r} "
                f"have none (no 'answer', 'solution', 'ground_truth', 'completion' or 'tests'); "
                f"prompt-only rows are for GRPO or PPO-RLHF, with your own rewards.{pairs}"
            )
        if not config.model.path:
            raise ConfigError(
                f"the rows of task {config.task.name!r} have no answers (prompt-only), so "
                f"payoff cannot pretrain its tiny base model on them: give model.path=<a local "
                f"Hugging Face model folder> (your model; `payoff train tiny-lm-pretrain "
                f"task.name=jsonl task.data=ROWS` on rows with answers makes one).{pairs}"
            )

    def reward_without_reference(self) -> RewardMix | None:
        """What scores held-out completions of prompt-only rows (no verifier to check them
        against): the run's own rewards where it has any; None where it cannot evaluate them."""
        return None

    def check_context(self, most: int = 5_000) -> None:
        """Stop now, not hours into training, where the longest prompt plus max_new_tokens
        does not fit the model's context (`context_limit`: GPT-2's n_positions, whose forward
        would fail on the first sequence that long; a rotary model's max_position_embeddings,
        past which it was never trained and one huge row can ask for hundreds of GB). Checks
        up to `most` training rows and the held-out split, and names the longest row."""
        context = context_limit(self.model)
        if context is None:
            return
        limit, fits = context
        rows = [("training", r) for r in (getattr(self.task, "train_rows", None) or [])[:most]]
        try:
            held_out = self.task.split("test", min(most, 1_000))
        except PayoffError:  # no held-out prompts ('text' rows for SFT): nothing to check
            held_out = []
        rows += [("held-out", r) for r in held_out]
        prompted = [(split, r) for split, r in rows if r.get("prompt")]
        if not prompted:
            return
        lengths = [len(self.tokenizer(self.prompt_text(r)).input_ids) for _, r in prompted]
        at = int(np.argmax(lengths))
        longest, new = lengths[at], self.max_new_tokens()
        if longest + new <= limit:
            return
        split, row = prompted[at]
        task = getattr(getattr(self.config, "task", None), "name", "?")
        where = f"a {split} row of task {task!r} ({str(row['prompt'])[:40]!r}...)"
        preferences = getattr(self.config, "preferences", None)
        if preferences is not None and getattr(preferences, "own", False):
            # trained on the user's pairs, it still evaluates on the task: say which is which
            where += (
                ", the task this run evaluates its greedy answers on (your pairs train it; "
                "task=... sets the rows it evaluates on)"
            )
        advice = (
            f"Lower max_new_tokens to {limit - longest} or less, shorten the prompts"
            if longest < limit
            else "Shorten or drop the rows that long"
        )
        raise ConfigError(
            f"the longest prompt, {where}, is {longest} tokens and max_new_tokens is {new}: "
            f"{longest + new} positions, past the {limit} this model "
            f"({getattr(self.model.config, 'model_type', '?')}) {fits}. {advice}, or use a "
            f"model with a longer context"
        )

    def prompt_text(self, row: Row) -> str:
        """What the model reads for a task row: its prompt, through the chat template when on."""
        return prompt_text(self.tokenizer, row, self.chat_template)

    def completion_text(self, row: Row, completion: str) -> str:
        """The text after `prompt_text(row)` when the model answers `completion` (its turn)."""
        return completion_text(self.tokenizer, row, completion, self.chat_template)

    def prompt_format(self, limit: int = SHOWN_PROMPT_CHARS) -> dict[str, Any]:
        """How prompts reach the model, for people: `chat_template` says whose template
        renders them, or that none does and why; `example` is one prompt as the model is
        given it (`model_input`: special tokens written out, within `limit` characters),
        with its token count, the split it is from and the row's own prompt (`row_prompt`,
        what the rewards read)."""
        config, tokenizer = self.config, self.tokenizer
        folder = str(getattr(tokenizer, "name_or_path", "") or "")
        if self.chat_template:
            template = tokenizer.get_chat_template(None, None)
            digest = hashlib.sha1(template.encode()).hexdigest()[:12]
            where = Path(folder, "chat_template.jinja")
            source = where.name if where.is_file() else "tokenizer_config.json"
            described = (
                f"the chat template of the tokenizer in {folder or '(a tokenizer made in Python)'}"
                f" ({source}, sha1 {digest}): prompts are rendered with it, ready for the "
                f"assistant's turn"
            )
        else:
            why = (
                "model.chat_template=none"
                if config.model.chat_template == "none"
                else "payoff's tiny model has none"
                if not config.model.path
                else f"the tokenizer in {folder} has none"
            )
            described = (
                f"no chat template ({why}): the model reads each row's prompt as it is, "
                f"conversations as plain role lines ('user: ...' then 'assistant: ')"
            )
        shown: dict[str, Any] = {"chat_template": described}
        example = self._example_row()
        if example is not None:
            split, row = example
            text, tokens = model_input(tokenizer, self.prompt_text(row))
            shown["example"] = shown_text(text, limit)
            shown["example_tokens"] = tokens
            shown["example_split"] = split
            shown["row_prompt"] = shown_text(str(row["prompt"]), limit)
        return shown

    def _example_row(self) -> tuple[str, Row] | None:
        """(split, row): the first held-out row with a prompt, else a training row's."""
        try:
            held_out = self.task.split("test", 1)
        except PayoffError:  # own data without a held-out split
            held_out = []
        training = (getattr(self.task, "train_rows", None) or [])[:5]
        rows = [("held-out", r) for r in held_out] + [("training", r) for r in training]
        return next(((split, r) for split, r in rows if r.get("prompt")), None)

    def show_prompt_format(self) -> None:
        """Say once, on stderr and in the run's summary.json (prompt_format, and the
        verifier that decides accuracy), how prompts reach the model."""
        if getattr(self, "_prompt_format_shown", False):
            return
        self._prompt_format_shown = True
        shown, short = self.prompt_format(), self.prompt_format(CONSOLE_PROMPT_CHARS)
        line = f"prompts: {shown['chat_template']}"
        if "example" in short:
            line += (
                f"; a {short['example_split']} one as the model reads it "
                f"({short['example_tokens']} tokens): {short['example']!r}"
            )
        print(line, file=sys.stderr)
        if self.run is not None:
            verifier = self.verifier.specs[0].name if self.verifier is not None else None
            self.run.write_summary(prompt_format=shown, verifier=verifier)

    def train_until(self, total: int) -> None:
        if self.state.step < total:
            self.show_prompt_format()
        super().train_until(total)

    def max_new_tokens(self) -> int:
        """Completion length for evaluation and prediction (config.max_new_tokens)."""
        return self.config.max_new_tokens

    def spaces(self) -> dict[str, str]:
        return {"vocabulary": str(len(self.tokenizer))}

    def stop_strings(self) -> list[str]:
        return []

    def evaluate(
        self,
        episodes: int = 200,
        seed: int | None = None,
        split: str = "test",
        k: Sequence[int] = (1, 8),
        temperature: float = 1.0,
    ) -> LMEvalResult:
        """Greedy accuracy and pass@k on `episodes` problems of a held-out split (test | ood);
        for prompt-only rows, the greedy completions' mean reward (no accuracy, no pass@k)."""
        rows = self.task.split(split, episodes)
        scorer = self.verifier or self.reward_without_reference()
        if scorer is None:
            raise ConfigError(
                f"the rows of task {self.config.task.name!r} have no answers (prompt-only) and "
                f"{self.name} has no reward to score held-out completions with"
            )
        result = evaluate_lm(
            self.model,
            self.tokenizer,
            rows,
            scorer,
            self.max_new_tokens(),
            self.stop_strings(),
            k=k,
            temperature=temperature,
            seed=self.config.seed + 3_000_000 if seed is None else seed,
            chat_template=self.chat_template,
            accuracy=self.verifier is not None,
        )
        result.split = split
        # (what the same evaluation at the same step returns: see final_evaluation)
        self._last_evaluation = ((self.step, episodes, seed, split, tuple(k), temperature), result)
        return result

    def final_evaluation(
        self, episodes: int, split: str = "test", k: Sequence[int] = ()
    ) -> LMEvalResult:
        """`evaluate(episodes, split=split, k=k)` for a run's end: the result of the periodic
        evaluation the loop ran at this same step with the same settings when there was one
        (the model has not changed since: finish() runs straight after the loop), else a
        fresh one. A real model's greedy pass costs minutes; it used to run twice."""
        memo = getattr(self, "_last_evaluation", None)
        if memo is not None and memo[0] == (self.step, episodes, None, split, tuple(k), 1.0):
            return memo[1]
        return self.evaluate(episodes, split=split, k=k)

    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """Completion(s) for a prompt string or a conversation (a list of {'role', 'content'}
        messages), or a list of either; greedy when deterministic.

        A prompt reaches the model as a task row's would: through the chat template when on
        (a conversation without one is written out as 'role: content' lines).
        """
        single = isinstance(observation, str) or (
            isinstance(observation, list) and bool(observation) and isinstance(observation[0], dict)
        )
        # neither a prompt nor a list: one item, which _prompt_row refuses by name
        listed = not single and isinstance(observation, list | tuple)
        items = list(observation) if listed else [observation]
        prompts = [self.prompt_text(_prompt_row(item)) for item in items]
        sampling = SamplingConfig(
            temperature=0.0 if deterministic else 1.0,
            max_new_tokens=self.max_new_tokens(),
            stop=self.stop_strings(),
        )
        completions = (
            LocalSampler(self.model, self.tokenizer).generate(prompts, sampling).completions
        )
        return completions[0] if single else completions

    def save_model(self, path: str | Path) -> Path:
        """Write the model in Hugging Face format (loads with AutoModelForCausalLM.from_pretrained)."""
        return save_lm(self.model, self.tokenizer, path)

    def export_model(self) -> None:
        """Save the trained model as RUN/model/ next to the checkpoints."""
        if self.run is not None:
            self.save_model(self.run.path / "model")


def _prompt_row(item: Any) -> Row:
    """A task row for what `predict` was given: a prompt string, or chat messages."""
    if isinstance(item, str) and item:
        return {"prompt": item}
    if isinstance(item, list) and item and all(isinstance(m, dict) for m in item):
        turns = messages("predict", "observation", item)
        return {"prompt": render_chat(turns), "prompt_messages": turns}
    raise ConfigError(
        f"predict takes a non-empty prompt string, a conversation (a list of {{'role', "
        f"'content'}} messages) or a list of either; got {item!r}"
    )
