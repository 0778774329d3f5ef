"""The CUDA backend: SDPA without cuDNN's attention; nothing padded or tuned at start."""

from __future__ import annotations

import contextlib

from torch.nn.attention import SDPBackend, sdpa_kernel

from verifier_svc.backends.generic import GenericBackend

# The attention kernels a pass may use: not cuDNN's. With a mask in bfloat16, torch 2.11 picks
# cuDNN's attention, which builds an execution plan for every new shape, and nearly every pass
# has a new one (the key length grows each round; batches vary). Measured on an H100
# (SmolLM2-135M, one-token rounds): 95 ms per round at new key lengths, 32 ms at lengths seen
# before; without cuDNN (the memory-efficient kernel) 45 ms either way. float32 never used it.
CUDA_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class CudaBackend(GenericBackend):
    """transformers' SDPA limited to CUDA_ATTENTION_BACKENDS for the span of each pass."""

    kind = "cuda"

    def kernels(self) -> contextlib.AbstractContextManager:
        # sdpa_kernel sets process-wide flags until the pass ends: passes run on one thread.
        return sdpa_kernel(CUDA_ATTENTION_BACKENDS)
