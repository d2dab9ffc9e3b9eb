"""Batched sampling from a causal LM with a KV cache: token ids, per-token logprobs and masks.

One batch of prompts in, one `Generation` out:

    prompts (strings) --tokenize, pad left--> prefill forward (fills the KV cache)
        --> loop: sample one token per row from softmax(logits / temperature) (top-p),
                  record its logprob, feed it back with the cache
        --> stop a row at EOS or a stop string; stop the loop when every row has stopped
            or after max_new_tokens.

`Sampler` is the seam for other engines: anything with the same `generate` signature
(a vLLM server on a GPU, say) can stand in for `LocalSampler`; the learners only read the
`Generation` it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from payoff.core.config import MAX_TOKENS, in_range
from payoff.core.errors import ConfigError, RunError
from payoff.core.state import tensors_to
from payoff.models.lean_forward import KVCache, lm_forward
from payoff.models.logprobs import prompt_pass, tokenize_starts


@dataclass
class SamplingConfig:
    """How completions are sampled.

    temperature: > 0 scales logits (1.0 = the model's own distribution); 0 means greedy.
        Learners compute training logprobs at the same temperature, so importance ratios
        compare like with like.
    top_p: nucleus sampling; 1.0 keeps the whole distribution (what on-policy RL assumes).
    max_new_tokens: completion length cap; a row that hits it is 'truncated'.
    stop: strings that end a completion (kept in the text, e.g. '</answer>'); EOS always stops.
    """

    temperature: float = field(default=1.0, metadata=in_range(0, low_open=True))
    top_p: float = field(default=1.0, metadata=in_range(0, 1, low_open=True))
    max_new_tokens: int = field(default=16, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    stop: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.temperature < 0:
            raise ConfigError(
                f"config key 'temperature' must be >= 0 (0 = greedy), got {self.temperature}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"config key 'top_p' must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens <= 0:
            raise ConfigError(f"config key 'max_new_tokens' must be > 0, got {self.max_new_tokens}")


@dataclass
class Generation:
    """A batch of prompts and their sampled completions.

    The tensors are on the device of the model that sampled them (`to` moves them: a
    learner calls `generation.to(its device)`, which costs nothing when they are there).
    Prompts are left-padded, completions right-padded, so `cat([prompt_ids, completion_ids])`
    is each row's real text with padding only at the two ends.
    """

    prompt_ids: torch.Tensor  # [B, P] long
    prompt_mask: torch.Tensor  # [B, P] long, 1 = real token
    completion_ids: torch.Tensor  # [B, T] long, pad after the end
    completion_mask: torch.Tensor  # [B, T] long, 1 = a sampled token that counts (EOS included)
    logprobs: torch.Tensor  # [B, T] float, logprob of each sampled token under the sampler
    completions: list[str]  # decoded completions (special tokens dropped)
    truncated: torch.Tensor  # [B] bool, hit max_new_tokens without EOS or a stop string

    @property
    def lengths(self) -> torch.Tensor:
        """Completion length of each row in tokens, [B]."""
        return self.completion_mask.sum(-1)

    def select(self, index: list[int]) -> Generation:
        """The rows at `index`, in that order (padding columns stay)."""
        at = torch.tensor(index, dtype=torch.long, device=self.prompt_ids.device)
        return Generation(
            prompt_ids=self.prompt_ids[at],
            prompt_mask=self.prompt_mask[at],
            completion_ids=self.completion_ids[at],
            completion_mask=self.completion_mask[at],
            logprobs=self.logprobs[at],
            completions=[self.completions[i] for i in index],
            truncated=self.truncated[at],
        )

    def clone(self) -> Generation:
        """A copy with tensors of its own (made outside inference mode: ordinary tensors)."""
        return Generation(
            prompt_ids=self.prompt_ids.clone(),
            prompt_mask=self.prompt_mask.clone(),
            completion_ids=self.completion_ids.clone(),
            completion_mask=self.completion_mask.clone(),
            logprobs=self.logprobs.clone(),
            completions=list(self.completions),
            truncated=self.truncated.clone(),
        )

    def to(self, device: torch.device | str) -> Generation:
        """The same generation with its tensors on `device` (itself when they are there)."""
        device = torch.device(device)
        if self.prompt_ids.device == device:
            return self
        return tensors_to(self, device)


class Sampler(Protocol):
    """Anything that turns prompts into a `Generation` (local model, remote engine, ...)."""

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, generator: torch.Generator | None = None
    ) -> Generation: ...

    def weights_updated(self) -> None:
        """The learner changed the policy's weights (after an optimizer step)."""
        ...

    def metrics(self) -> dict[str, float]:
        """Backend numbers for the training log (workers, restarts); {} when there are none."""
        ...

    def close(self) -> None:
        """Free what the sampler holds outside this process (worker processes); idempotent."""
        ...


class WeightVersions:
    """The learner's trainable weights as numbered versions, for a sampler that holds a copy
    of the model elsewhere (a second process, Ray actors).

    `due()` returns the weights when a new version must be sent -- the first time, after
    `updated()`, or when torch's per-tensor write counter moved (it catches
    `load_state_dict` and most in-place writes, but not fused optimizer kernels or
    `p.data = ...`: trainers call `updated()`) -- and None when the copy is current.
    Frozen weights (a LoRA base) are never sent: the copy loaded the same ones from disk.
    """

    def __init__(self, model: Any):
        self.model = model
        self.version = 0
        self.bytes = 0  # size of one version
        self._fingerprint: tuple[int, ...] | None = None  # None: nothing sent yet
        self._updated = False

    def updated(self) -> None:
        """The learner changed its weights (an optimizer step)."""
        self._updated = True

    def forget(self) -> None:
        """The copy is gone (a new process): the next `due()` sends the weights."""
        self._fingerprint = None

    def due(self) -> dict[str, torch.Tensor] | None:
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        fingerprint = tuple(p._version for p in params.values())
        if self._fingerprint is not None and not self._updated and fingerprint == self._fingerprint:
            return None
        self._updated = False
        self._fingerprint = fingerprint
        self.version += 1
        self.bytes = sum(p.numel() * p.element_size() for p in params.values())
        return {n: p.detach() for n, p in params.items()}


def load_weights(model: Any, weights: dict[str, torch.Tensor], whose: str) -> None:
    """Put a learner's weights version into a sampler's copy of the model (strict about
    names it does not know, which would mean the two models were built differently)."""
    missing = model.load_state_dict(weights, strict=False)
    if missing.unexpected_keys:
        raise RunError(
            f"the learner's weights do not fit {whose}: unexpected keys "
            f"{missing.unexpected_keys[:3]} (was the model built differently?)"
        )


def sampling_stream(rng_state: torch.Tensor | None, seed: int | None) -> torch.Generator:
    """A sampler copy's random stream: the caller's state when it sent one, else `seed`."""
    generator = torch.Generator()
    if rng_state is not None:
        generator.set_state(rng_state)
    else:
        generator.manual_seed(int(seed or 0))
    return generator


def continue_stream(generator: torch.Generator | None, state: torch.Tensor) -> None:
    """The caller's stream goes on where a sampler copy left it (None: torch's global one)."""
    if generator is not None:
        generator.set_state(state)
    else:
        torch.set_rng_state(state)


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from [B, V] logits; returns (tokens [B], their logprobs [B]).

    A `generator` on another device than the logits (the trainers' seeded CPU generator
    with a model on a GPU) draws on its own device, so a seed gives the same tokens there
    as on the CPU when the probabilities agree.
    """
    if temperature == 0:
        tokens = logits.argmax(-1)
        logprobs = torch.log_softmax(logits.float(), -1).gather(-1, tokens[:, None])[:, 0]
        return tokens, logprobs
    logprobs_all = torch.log_softmax(logits.float() / temperature, -1)  # [B, V]
    probs = logprobs_all.exp()
    if top_p < 1.0:
        # Keep the smallest set of tokens whose mass reaches top_p; the top token always stays.
        sorted_probs, order = probs.sort(-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
        logprobs_all = probs.log()
    if generator is not None and generator.device != probs.device:
        tokens = torch.multinomial(probs.to(generator.device), 1, generator=generator)
        tokens = tokens.to(probs.device)[:, 0]
    else:
        tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return tokens, logprobs_all.gather(-1, tokens[:, None])[:, 0]


def stop_token_ids(model: Any, tokenizer: Any) -> torch.Tensor:
    """The token ids that end a completion: the tokenizer's eos and every id the model's
    generation_config lists as eos (chat models list several: Qwen's <|im_end|> and
    <|endoftext|>, Llama 3's <|eot_id|> and <|end_of_text|>), as transformers' generate
    stops on them."""
    ids = {tokenizer.eos_token_id}
    listed = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(listed if isinstance(listed, list | tuple) else [listed])
    device = next(model.parameters()).device
    return torch.tensor(sorted(i for i in ids if isinstance(i, int)), device=device)


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, P] and attention mask of `prompts`, each after the tokenizer's
    BOS where it puts one before every text (`leading_bos`)."""
    return pad_left(tokenize_starts(tokenizer, prompts), tokenizer.pad_token_id, device)


def pad_left(
    rows: Sequence[Sequence[int]], pad: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id rows left-padded with `pad` into ids [B, P] and their attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids.to(device), mask.to(device)


class LocalSampler:
    """Sampling with the model in this process, using its KV cache (`use_cache=True`)."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size  # rows per forward; bounds memory for big batches

    def weights_updated(self) -> None:
        """Nothing to do: this sampler uses the learner's model itself."""

    def metrics(self) -> dict[str, float]:
        """No backend numbers: sampling runs in this process."""
        return {}

    def close(self) -> None:
        """Nothing to free: no workers."""

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, generator: torch.Generator | None = None
    ) -> Generation:
        return self.generate_ids(tokenize_starts(self.tokenizer, prompts), sampling, generator)

    def generate_ids(
        self,
        prompt_ids: list[list[int]],
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
    ) -> Generation:
        """`generate` from prompts given as token ids (each with its BOS, as
        `tokenize_starts` gives them): the agent rollout's contexts, whose tool results are
        encoded as text, never as the special tokens their text may spell."""
        # Inference mode: the same kernels as no_grad, without autograd's version counters
        # and view tracking (~8% of a small model's decode step). Its tensors cannot be saved
        # for a backward pass, so the few that leave it are copied out as ordinary ones.
        with torch.inference_mode():
            parts = [
                self._generate(prompt_ids[i : i + self.batch_size], sampling, generator)
                for i in range(0, len(prompt_ids), self.batch_size)
            ]
            pad = self.tokenizer.pad_token_id
            generation = parts[0] if len(parts) == 1 else concat_generations(parts, pad)
        return generation.clone()

    def _generate(
        self, prompts: list[list[int]], sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Generation:
        tokenizer, model = self.tokenizer, self.model
        device = next(model.parameters()).device
        # GRPO-style batches repeat each prompt G times in a row: run each prompt once and
        # share its key/value cache with its G samples (the prompt pass is most of the work
        # when completions are short).
        group = repeated_group_size(prompts)
        prompt_ids, prompt_mask = pad_left(prompts[::group], tokenizer.pad_token_id, device)
        batch = len(prompts)
        eos, pad = stop_token_ids(model, tokenizer), tokenizer.pad_token_id
        was_training = model.training
        model.eval()

        cache, logits, positions = prompt_pass(model, prompt_ids, prompt_mask, group)
        if group > 1:
            prompt_ids = prompt_ids.repeat_interleave(group, 0)  # [B, P]
            prompt_mask = prompt_mask.repeat_interleave(group, 0)
        attention = prompt_mask
        next_position = positions[:, -1:] + 1  # [B, 1]

        tokens_out, logprobs_out, masks_out = [], [], []
        # Rows still sampling, when the cache is the lean forward's: finished rows leave the
        # forward passes (the logits of a finished row stay as they were, and sampling still
        # draws for every row, so the random stream is the same).
        active = torch.arange(batch, device=device) if isinstance(cache, KVCache) else None
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        stop_hit = torch.zeros(batch, dtype=torch.bool, device=device)
        longest_stop = max((len(s) for s in sampling.stop), default=0)
        for step in range(sampling.max_new_tokens):
            tokens, logprobs = sample_next(logits, sampling.temperature, sampling.top_p, generator)
            tokens = tokens.masked_fill(done, pad)
            tokens_out.append(tokens)
            logprobs_out.append(logprobs.masked_fill(done, 0.0))
            masks_out.append((~done).long())
            done = done | torch.isin(tokens, eos)
            if longest_stop:
                _mark_stop_strings(tokenizer, tokens_out, sampling.stop, done, stop_hit)
            if step == sampling.max_new_tokens - 1 or bool(done.all()):
                break  # the last token sampled: no forward pass for logits nobody reads
            if active is not None and bool(done[active].any()):
                keep = (~done[active]).nonzero()[:, 0]  # positions within the active rows
                cache.select(keep)
                active, attention, next_position = (
                    active[keep],
                    attention[keep],
                    next_position[keep],
                )
            attention = torch.cat([attention, attention.new_ones(attention.shape[0], 1)], 1)
            fed = tokens[:, None] if active is None else tokens[active, None]
            step_logits, cache = lm_forward(model, fed, attention, next_position, cache)
            if active is None:
                logits = step_logits[:, -1]
            else:
                logits = logits.index_copy(0, active, step_logits[:, -1])
            next_position = next_position + 1

        model.train(was_training)
        completion_ids = torch.stack(tokens_out, 1)  # [B, T]
        completion_mask = torch.stack(masks_out, 1)
        ended = torch.isin(completion_ids, eos).any(-1) | stop_hit
        texts = tokenizer.batch_decode(
            (completion_ids * completion_mask + pad * (1 - completion_mask)).tolist(),
            skip_special_tokens=True,
        )
        return Generation(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            completion_mask=completion_mask,
            logprobs=torch.stack(logprobs_out, 1),
            completions=[_cut_at_stop(t, sampling.stop) for t in texts],
            truncated=~ended,
        )


def _mark_stop_strings(
    tokenizer: Any,
    tokens_out: list[torch.Tensor],
    stop: Sequence[str],
    done: torch.Tensor,
    stop_hit: torch.Tensor,
) -> None:
    """Mark `done` and `stop_hit` (in place) for each unfinished row whose last tokens now
    spell one of the `stop` strings."""
    # Only the tail can newly contain a stop string; a token is >= 1 character.
    longest_stop = max(len(s) for s in stop)
    tail = torch.stack(tokens_out[-(longest_stop + 1) :], 1).tolist()
    for row in range(len(tail)):
        if not done[row]:
            text = tokenizer.decode(tail[row], skip_special_tokens=True)
            if any(s in text for s in stop):
                done[row] = True
                stop_hit[row] = True


def repeated_group_size(prompts: Sequence[Any]) -> int:
    """G when the prompts come in consecutive runs of G identical ones (GRPO's groups), else 1."""
    group = 1
    while group < len(prompts) and prompts[group] == prompts[0]:
        group += 1
    if group == 1 or len(prompts) % group:
        return 1
    runs_ok = all(
        prompts[i + j] == prompts[i] for i in range(0, len(prompts), group) for j in range(group)
    )
    return group if runs_ok else 1


def _cut_at_stop(text: str, stop: list[str]) -> str:
    """Text up to and including the first stop string (a token may run past it)."""
    best = None
    for s in stop:
        i = text.find(s)
        if i >= 0 and (best is None or i + len(s) < best):
            best = i + len(s)
    return text if best is None else text[:best]


def _pad_to(x: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    extra = width - x.shape[1]
    if extra == 0:
        return x
    filler = torch.full((x.shape[0], extra), value, dtype=x.dtype, device=x.device)
    return torch.cat([filler, x] if left else [x, filler], 1)


def concat_generations(parts: list[Generation], pad_id: int) -> Generation:
    """Stack generations of different widths into one batch (prompts left-, completions right-padded)."""
    p = max(g.prompt_ids.shape[1] for g in parts)
    t = max(g.completion_ids.shape[1] for g in parts)
    return Generation(
        prompt_ids=torch.cat([_pad_to(g.prompt_ids, p, pad_id, True) for g in parts]),
        prompt_mask=torch.cat([_pad_to(g.prompt_mask, p, 0, True) for g in parts]),
        completion_ids=torch.cat([_pad_to(g.completion_ids, t, pad_id, False) for g in parts]),
        completion_mask=torch.cat([_pad_to(g.completion_mask, t, 0, False) for g in parts]),
        logprobs=torch.cat([_pad_to(g.logprobs, t, 0.0, False) for g in parts]),
        completions=[c for g in parts for c in g.completions],
        truncated=torch.cat([g.truncated for g in parts]),
    )
