"""The target model's forward pass over a round's new tokens and token tree, on top of a
session's cache: one pass, with the tree attention mask (SpecInfer; Stratos, section 2.1)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel

from verifier_svc.backends import Backend, backend_for
from verifier_svc.kv_cache import KVCache
from verifier_svc.layer_masks import layer_windows, model_masks
from verifier_svc.token_tree import TokenTree, tree_attention_mask, tree_position_ids


class TargetModel:
    """Scores token trees with one forward pass per round; holds no per-session state.

    Every pass is the model's own forward (its `logits_to_keep` rows), given the tree's mask
    within each layer's window (layer_masks.py) and the tree's positions: the logits are what
    the model computes after its decoder, whatever it applies there (logit scaling, soft caps).
    """

    def __init__(
        self, model: PreTrainedModel, name: str, graphs: bool = True, cuda_compiled: str = "layers", compiled_passes: bool = False,
        one_row_copies: bool = True, compiled_store: Path | None = None, float32_copies: bool = True, onnx_passes: bool = False,
        onednn_copies: bool = True,
    ) -> None:
        """`graphs`: let the backend replay lone passes as recorded graphs where it can (CUDA);
        `cuda_compiled`: record them with the model's decoder layers compiled ("layers"), its
        norms and MLPs ("blocks") or nothing ("none");
        `compiled_passes`: on CPU, run lone passes as compiled static passes, their compiled code
        kept in `compiled_store` (None: in this process only);
        `one_row_copies`: on CPU, let one-token passes read a one-row copy of the linear weights;
        `float32_copies`: on CPU, let products of 4 rows or more read float32 copies of bfloat16
        or float16 linear weights;
        `onnx_passes`: on CPU, run lone passes of a few tokens through onnxruntime where the model
        allows (backends/onnx_passes.py);
        `onednn_copies`: on CPU, let tuning give float32 products of several rows oneDNN copies
        of the linear weights where they pay."""
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size: int = model.config.vocab_size
        self.context_length: int = model.config.max_position_embeddings
        self.layers = layer_windows(model.config)
        # What only this device kind needs (kernels, layouts, padding, tuning): backends/.
        self.backend: Backend = backend_for(
            model, graphs, cuda_compiled, compiled_passes, one_row_copies, compiled_store, float32_copies, onnx_passes, onednn_copies
        )
        # pass_tokens[r - 1]: the tokens a lone pass of r real tokens runs with (padding the
        # rest); past its end, r itself.
        self.pass_tokens: list[int] = [1]
        # pass_seconds[r - 1]: what a lone pass of r real tokens took, padded, after
        # pass_context_tokens cached ones, as tune_pass_sizes timed it (empty: not timed).
        self.pass_seconds: list[float] = []
        self.pass_context_tokens = 0
        # (rows, slots, seconds) of batched passes timed at start (batched_pass_timing.py; empty: none).
        self.batched_pass_seconds: list[tuple[int, int, float]] = []

    @property
    def min_pass_tokens(self) -> int:
        """The token rows a batched pass has at least (the backend's choice)."""
        return self.backend.min_pass_tokens

    def kernels(self) -> contextlib.AbstractContextManager:
        """The context every pass of this target runs in (the backend's kernels and layouts)."""
        return self.backend.kernels()

    def new_cache(self) -> KVCache:
        """A new session's empty cache (where its entries live is the backend's choice)."""
        return self.backend.new_cache()

    @torch.inference_mode()
    def score(self, cache: KVCache, pending: Sequence[int], tree: TokenTree, argmax_only: bool = False) -> torch.Tensor:
        """Append the pending tokens (committed, not yet cached; at least one, the last being the
        tree's root) and the tree's n nodes to the cache in ONE forward pass with the tree mask
        (within each layer's window: layer_masks.py). Return [n+1, vocab] float32 logits on the CPU: row 0 after the root, row i+1 after node i.

        Only those rows go through the output head (on a backend's static pass, all rows do). A
        pass may be padded (to pass_tokens[real - 1] tokens: backends/cpu_tuning.py; a static pass to its
        size) with tokens no real token attends to. The cache grows by
        exactly len(pending) + n entries: the pending tokens, then the nodes in node order (see
        KVCache.keep for keeping one path).

        `argmax_only`: the caller reads only each row's argmax (ties to the lowest id), so a row
        may hold -inf for tokens that cannot be its argmax (a lone pass's choice: backends/base.py).
        """
        start, n = len(cache), len(tree)
        real = len(pending) + n
        mask = tree_attention_mask(tree, start, len(pending))  # [real, start + real]
        positions = tree_position_ids(tree, start, len(pending))  # [real]
        ids = [*pending, *tree.tokens.tolist()]
        lone = self.backend.lone_pass(cache, start, real)
        if lone is not None:  # a static pass, perhaps recorded, or another engine's step
            with self.kernels():
                return lone.score(cache, ids, positions, mask, start, len(pending) - 1, argmax_only).float().cpu()
        size = self.pass_tokens[real - 1] if real <= len(self.pass_tokens) else real
        padding = size - real if start + size <= self.context_length else 0
        if padding:  # padding sees the cache and itself; no real token sees it
            ids += [ids[-1]] * padding
            positions = torch.cat([positions, positions[-1:].expand(padding)])
            mask = torch.cat([mask, torch.zeros(real, padding, dtype=torch.bool)], dim=1)
            pad_rows = torch.zeros(padding, start + real + padding, dtype=torch.bool)
            pad_rows[:, :start] = True
            pad_rows[:, start + real :] = torch.eye(padding, dtype=torch.bool)
            mask = torch.cat([mask, pad_rows], dim=0)
        keys = torch.cat([torch.arange(start), positions])  # a cached entry's slot is its position
        masks = model_masks(self.layers, mask[None], positions[None], keys[None], self.dtype, self.device)
        with self.kernels():
            out = self.model(
                input_ids=torch.tensor([ids], dtype=torch.long, device=self.device),
                position_ids=positions.unsqueeze(0).to(self.device),
                attention_mask=masks,
                cache=cache.cache,
                use_cache=True,
                logits_to_keep=n + 1 + padding,
            )
        cache.truncate(start + real)
        return out.logits[0, : n + 1].float().cpu()  # the kept rows end with the padding

    def tune_pass_sizes(self, context_tokens: int = 128, max_tokens: int = 16, repeats: int = 3) -> list[float]:
        """Time lone passes of 1..max_tokens tokens after context_tokens cached ones and pad
        from now on as the backend decides (on CPU: backends/cpu_tuning.py), setting
        pass_tokens, pass_seconds and pass_context_tokens. Returns the unpadded seconds of the
        kept configuration (empty where the backend does not tune)."""
        return self.backend.tune(self, context_tokens, max_tokens, repeats)
