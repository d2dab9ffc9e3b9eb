"""Learned reward models: a language-model backbone with a scalar head, usable as a reward function.

    score(prompt, completion) = head( h_last )     h_last = the backbone's final hidden state
                                                   at the completion's last token (EOS appended)

Sequences are left-padded, so the last position of every row is its last real token and the
score is read from one column. Saved as a folder: the backbone in Hugging Face format (so the
same tokenizer comes along) plus `value_head.safetensors`. `RewardModelScorer` wraps one or more of
them in the `(prompts, completions, **columns) -> list[float]` contract, averaging an
ensemble and keeping its members' spread.

The backbone and head live on one device (`build_scalar_model(..., device=...)`); the head
stays float32 whatever the backbone's dtype, and scores without gradients come back on the CPU.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from payoff.core.errors import CheckpointError, ConfigError
from payoff.models.lm import ModelConfig, context_limit, load_lm, model_device, save_lm
from payoff.models.logprobs import tokenize_starts
from payoff.track.checkpoint import load_state, save_state


class ScalarHeadModel(nn.Module):
    """A causal LM's transformer body plus a linear head giving one number per sequence."""

    def __init__(self, language_model: Any, tokenizer: Any):
        super().__init__()
        self.language_model = language_model  # keeps save_pretrained and the config at hand
        self.tokenizer = tokenizer
        hidden = language_model.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.normal_(self.head.weight, std=1.0 / (hidden + 1) ** 0.5)
        nn.init.zeros_(self.head.bias)
        self.said_truncated = False  # whether encode has said it cut a sequence
        self.context = context_limit(language_model)  # (a walk over its modules: once)

    def body(self) -> nn.Module:
        return self.language_model.get_decoder()

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final hidden states [B, L, H] of left-padded sequences, in the head's dtype."""
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.body()(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=False,
        ).last_hidden_state
        return hidden.to(self.head.weight.dtype)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """One score per left-padded sequence: [B, L] -> [B]."""
        return self.head(self.hidden_states(input_ids, attention_mask)[:, -1]).squeeze(-1).float()

    def token_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The head at every position [B, L] (a critic's value per token in PPO-RLHF)."""
        return self.head(self.hidden_states(input_ids, attention_mask)).squeeze(-1).float()

    def encode(self, prompts: Sequence[str], completions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Left-padded ids of prompt + completion + EOS (the EOS marks 'the answer is complete').

        A sequence longer than the backbone's context (`context_limit`) keeps its last
        tokens, the completion's end among them: a policy's completion, decoded and read
        again after its prompt, can come back as more tokens than the policy generated
        (36 for 24 with a byte-level BPE), and GPT-2's forward would fail on it mid-run.
        The first time, it is said on the console."""
        tok = self.tokenizer
        texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        ids = [[*row, tok.eos_token_id] for row in tokenize_starts(tok, texts)]
        context = self.context
        if context is not None and any(len(row) > context[0] for row in ids):
            limit = context[0]
            if not self.said_truncated:
                self.said_truncated = True
                longest = max(len(row) for row in ids)
                print(
                    f"reward model: a prompt and completion of {longest} tokens passed the "
                    f"{limit} positions its backbone {context[1]}; such sequences are scored on "
                    f"their last {limit} tokens",
                    file=sys.stderr,
                )
            ids = [row[-limit:] for row in ids]
        width = max(len(row) for row in ids)
        pad = tok.pad_token_id
        on = {"device": self.device}
        return {
            "input_ids": torch.tensor([[pad] * (width - len(r)) + r for r in ids], **on),
            "attention_mask": torch.tensor(
                [[0] * (width - len(r)) + [1] * len(r) for r in ids], **on
            ),
        }

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        """Scores [B] of prompt/completion pairs, with gradients."""
        return self(**self.encode(prompts, completions))

    @torch.no_grad()
    def score_batched(
        self, prompts: Sequence[str], completions: Sequence[str], batch_size: int = 256
    ) -> torch.Tensor:
        """Scores [B] without gradients, `batch_size` rows at a time, on the CPU."""
        was_training = self.training
        self.eval()
        parts = [
            self.score(prompts[i : i + batch_size], completions[i : i + batch_size]).cpu()
            for i in range(0, len(prompts), batch_size)
        ]
        self.train(was_training)
        return torch.cat(parts) if parts else torch.zeros(0)

    def save(self, path: str | Path, **info: Any) -> Path:
        """Write the backbone (Hugging Face format), the head and `info` into folder `path`."""
        folder = save_lm(self.language_model, self.tokenizer, path)
        save_state(folder / "value_head.safetensors", self.head.state_dict())
        (folder / "reward_model.json").write_text(json.dumps(info, indent=1))
        return folder


def build_scalar_model(
    model: ModelConfig, seed: int = 0, device: torch.device | str | None = None
) -> ScalarHeadModel:
    """A fresh head on the LM that `model` names (the head is seeded by `seed`), on `device`."""
    language_model, tokenizer = load_lm(model, seed=seed, device=device)
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        scalar = ScalarHeadModel(language_model, tokenizer)
    finally:
        torch.set_rng_state(state)
    scalar.head.to(model_device(language_model))
    return scalar


def load_reward_model(
    path: str | Path, device: torch.device | str | None = None
) -> ScalarHeadModel:
    """A reward model saved by `ScalarHeadModel.save`, on `device` (default: the CPU)."""
    folder = Path(path).expanduser()
    if not (folder / "value_head.safetensors").is_file():
        raise ConfigError(
            f"{str(folder)!r} is not a reward model folder (no value_head.safetensors); train one with "
            "`payoff train prefs-reward-model` and pass RUN/reward_model/member_0"
        )
    model = ScalarHeadModel(*load_lm(ModelConfig(path=str(folder)), device=device))
    model.head.to(model_device(model.language_model))
    head = load_state(folder / "value_head.safetensors", what="reward model head")
    try:
        model.head.load_state_dict(head)
    except (RuntimeError, TypeError, AttributeError) as err:
        raise CheckpointError(f"reward model head in {str(folder)!r} does not fit: {err}") from None
    return model.eval().requires_grad_(False)


def reward_model_paths(path: str | Path) -> list[Path]:
    """Member folders of a reward model: `path` itself, or every member_* inside it."""
    folder = Path(path).expanduser()
    if (folder / "value_head.safetensors").is_file():
        return [folder]
    members = sorted(p for p in folder.glob("member_*") if (p / "value_head.safetensors").is_file())
    if not members:
        raise ConfigError(
            f"no reward model in {str(folder)!r}: expected value_head.safetensors or member_*/ folders "
            "(a run of the reward_model algorithm writes RUN/reward_model/)"
        )
    return members


class RewardModelScorer:
    """Reward function from learned reward model(s): the ensemble mean; `last_std` keeps the spread."""

    __name__ = "reward_model"

    def __init__(self, models: Sequence[ScalarHeadModel], batch_size: int = 256):
        if not models:
            raise ConfigError("a reward model scorer needs at least one model")
        self.models = list(models)
        self.batch_size = batch_size
        self.last_std: list[float] = []
        self.last_members: torch.Tensor | None = None

    @classmethod
    def from_path(
        cls, path: str | Path, device: torch.device | str | None = None
    ) -> RewardModelScorer:
        """Every member under `path` (see reward_model_paths), each on `device`."""
        return cls([load_reward_model(p, device) for p in reward_model_paths(path)])

    def members(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        """Every member's scores: [K, B]."""
        return torch.stack(
            [m.score_batched(prompts, completions, self.batch_size) for m in self.models]
        )

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], **columns: Any
    ) -> list[float]:
        scores = self.members(list(prompts), list(completions))
        self.last_members = scores
        self.last_std = scores.std(0, unbiased=False).tolist()
        return scores.mean(0).tolist()
