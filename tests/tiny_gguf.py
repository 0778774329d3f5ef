"""Writes a transformers model as a GGUF file (test fixtures), as llama.cpp's converter lays one
out: the architecture's hyperparameters under `<arch>.*` (the keys transformers' GGUF loader
reads back), the default model's tokenizer copied from its GGUF (unless told not to), and every
tensor in float32 under its GGUF name (gguf's TensorNameMap).

For architectures whose GGUF tensors are the transformers tensors as they are (Qwen2, Qwen3),
plus Mamba's two changes (A stored as -exp(A_log), the convolution without its middle axis);
not Llama, whose q/k projections llama.cpp permutes.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import PreTrainedModel
from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

from specdec.model_files import default_gguf


def _arch(model_type: str) -> gguf.MODEL_ARCH:
    return next(arch for arch, name in gguf.MODEL_ARCH_NAMES.items() if name == model_type)


def _hyperparameter(config, attribute: str):  # type: ignore[no-untyped-def]
    value = getattr(config, attribute, None)
    if value is None:
        value = (getattr(config, "rope_parameters", None) or {}).get(attribute)
    return value


def _copy_tokenizer(writer: gguf.GGUFWriter) -> None:
    reader = gguf.GGUFReader(str(default_gguf()))
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, field.contents())
        else:
            writer.add_key_value(key, field.contents(), kind)


def _tensor(arch: gguf.MODEL_ARCH, gguf_name: str, tensor: torch.Tensor) -> np.ndarray:
    if arch == gguf.MODEL_ARCH.MAMBA and gguf_name.endswith(".ssm_a"):
        tensor = -torch.exp(tensor)
    if arch == gguf.MODEL_ARCH.MAMBA and gguf_name.endswith(".ssm_conv1d.weight"):
        tensor = tensor.squeeze(1)
    return tensor.detach().float().numpy()


def write_gguf(model: PreTrainedModel, path: Path, tokenizer: bool = True) -> Path:
    config = model.config
    arch = _arch(config.model_type)
    name = gguf.MODEL_ARCH_NAMES[arch]
    writer = gguf.GGUFWriter(str(path), name)
    writer.add_name(f"tiny-{name}")
    for key, attribute in GGUF_CONFIG_MAPPING[name].items():
        value = _hyperparameter(config, attribute) if attribute else None
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            writer.add_uint32(f"{name}.{key}", value)
        elif isinstance(value, float):
            writer.add_float32(f"{name}.{key}", value)
    if tokenizer:
        _copy_tokenizer(writer)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise KeyError(f"no GGUF name for {hf_name}")
        writer.add_tensor(gguf_name, _tensor(arch, gguf_name, tensor))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
