"""What a device backend provides."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Protocol

from transformers import PretrainedConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from verifier_svc.kv_cache import KVCache
    from verifier_svc.target_model import TargetModel


class LonePass(Protocol):
    """A lone pass run another way than the model's forward as it is (a static pass, perhaps
    recorded as a device graph: static_pass.py; another engine's step: onnx_passes.py)."""

    def score(
        self, cache: KVCache, ids: Sequence[int], positions: torch.Tensor, mask: torch.Tensor, start: int, first_row: int,
        argmax_only: bool = False,
    ) -> torch.Tensor:
        """The pass of `ids` ([r] at `positions` after `start` cached entries, mask [r, start + r]
        bool) appended to `cache`: [r - first_row, vocab] logits of its rows from `first_row` on.
        `argmax_only`: only each row's argmax will be read, so a row may hold -inf for tokens that
        cannot be its argmax."""
        ...


class Backend(Protocol):
    """One device kind's choices around the model's own forward. Chosen once, at load."""

    kind: str

    @staticmethod
    def attention_implementation(config: PretrainedConfig) -> str:
        """The attention implementation (transformers' attn_implementation) a model loads with."""
        ...

    @property
    def min_pass_tokens(self) -> int:
        """The token rows a batched pass has at least (more rows padded in when fewer)."""
        ...

    def kernels(self) -> contextlib.AbstractContextManager:
        """The context every pass runs in (kernel choices, layouts); passes run on one thread."""
        ...

    def new_cache(self) -> KVCache:
        """An empty KV cache for a new session (in storage the backend keeps, where it keeps any)."""
        ...

    def lone_pass(self, cache: KVCache, start: int, real: int) -> LonePass | None:
        """How a lone pass of `real` tokens after `start` cached ones runs where the backend has
        its own way (a recorded graph, another engine); None: the model's forward, as it is."""
        ...

    def pass_counts(self) -> tuple[int, int]:
        """(passes recorded as device graphs, lone passes replayed from them) in this process."""
        ...

    def engine(self) -> str:
        """What runs the passes now, in words (ModelInfo.engine): the choices made at load and
        kept by the start-up checks and tuning, so that a path turned off shows."""
        ...

    def prepare(self, target: TargetModel) -> None:
        """Make, before the verifier serves, what its passes will need (CUDA: record graphs)."""
        ...

    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        """Time lone passes of 1..max_tokens tokens and set target.pass_tokens, pass_seconds
        and pass_context_tokens (and any layout choice); return the kept configuration's unpadded seconds (empty: this device does not tune)."""
        ...
