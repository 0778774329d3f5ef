"""The device boundary: one backend per device kind, chosen once when the target loads.

Everything only one kind of device needs around the model's own forward lives behind a
`Backend` (base.py): the attention implementation a model loads with, the kernels a pass runs
in, the rows a batched pass is padded to, where sessions' caches live and how a lone pass runs
(recorded graphs on CUDA), thread settings and start-up tuning. TargetModel and
the general path (sessions, trees, acceptance, scheduling) call the backend and never ask which
device they run on; `backend_for` is the one place that does.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PretrainedConfig

from verifier_svc.backends.base import Backend
from verifier_svc.backends.cpu import CpuBackend
from verifier_svc.backends.cuda import CudaBackend
from verifier_svc.backends.generic import GenericBackend

__all__ = ["Backend", "attention_for", "backend_for"]

_KINDS: dict[str, type[CpuBackend] | type[CudaBackend]] = {"cpu": CpuBackend, "cuda": CudaBackend}


def backend_class(device: torch.device | str) -> type[CpuBackend] | type[CudaBackend] | type[GenericBackend]:
    """The backend class for a device kind (GenericBackend for kinds without one: mps, xpu)."""
    return _KINDS.get(torch.device(device).type, GenericBackend)


def attention_for(config: PretrainedConfig, device: torch.device | str) -> str:
    """The attention implementation a model with this config loads with on `device`."""
    return backend_class(device).attention_implementation(config)


def backend_for(
    model: torch.nn.Module, graphs: bool = True, cuda_compiled: str = "layers", compiled_passes: bool = False, one_row_copies: bool = True,
    compiled_store: Path | None = None, float32_copies: bool = True, onnx_passes: bool = False, onednn_copies: bool = True,
) -> Backend:
    """The backend of a loaded model, on the device of its first parameter. On CUDA, `graphs`:
    replay lone passes as recorded graphs (backends/cuda.py), recorded with the parts of the
    model `cuda_compiled` names compiled ("layers", "blocks" or "none": cuda.COMPILED). On CPU,
    `compiled_passes`: run lone passes as compiled static passes (backends/cpu_compiled.py), their
    compiled code kept in `compiled_store` (None: in this process only);
    `one_row_copies`: let one-token passes read one-row copies of the linear weights where they pay,
    `float32_copies`: products of 4 rows or more float32 copies of bfloat16 or float16 ones
    (linear_layout.py); `onnx_passes`: run lone passes of a few tokens through onnxruntime where
    the model allows (onnx_passes.py); `onednn_copies`: let products of several float32 rows read
    oneDNN copies of the linear weights where tuning finds they pay."""
    kind = backend_class(next(model.parameters()).device)
    if kind is CudaBackend:
        return CudaBackend(model, graphs=graphs, compiled=cuda_compiled)
    if kind is CpuBackend:
        return CpuBackend(
            model, compiled_passes=compiled_passes, one_row=one_row_copies, compiled_store=compiled_store, float32_rows=float32_copies,
            onnx_passes=onnx_passes, onednn=onednn_copies,
        )
    return kind(model)
