"""The target model's forward pass over a round's new tokens and token tree, on top of a
session's cache: one pass, with the tree attention mask (SpecInfer; Stratos, section 2.1)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import PreTrainedModel

from verifier_svc.kv_cache import KVCache
from verifier_svc.layer_masks import layer_windows, model_masks
from verifier_svc.linear_layout import linear_switch
from verifier_svc.pass_sizes import fastest_at_least
from verifier_svc.token_tree import TokenTree, chain, tree_attention_mask, tree_position_ids

# On CPU, F.linear runs matrix products with 2 or 3 rows 2-3x slower than with 4 (measured with
# torch 2.13's MKL on a 2-core AMD EPYC: the model's linear layers take 10 ms for 1 row, 23 ms
# for 2, 34 ms for 3, 17 ms for 4), so a target whose passes run through it (where
# tune_pass_sizes timed it faster than weight first: linear_layout.py) pads a batched pass to
# this many rows. Weight first, as a CPU target runs until tuned, nothing is padded.
CPU_MIN_PASS_TOKENS = 4

# On CUDA, the attention kernels a pass may use: not cuDNN's. With a mask in bfloat16, torch
# 2.11 picks cuDNN's attention, which builds an execution plan for every new shape, and nearly
# every pass has a new one (the key length grows each round; batches vary). Measured on an H100
# (SmolLM2-135M, one-token rounds): 95 ms per round at new key lengths, 32 ms at lengths seen
# before; without cuDNN (the memory-efficient kernel) 45 ms either way. float32 never used it.
CUDA_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels(device: torch.device) -> contextlib.AbstractContextManager:
    """The context a target pass runs in: on CUDA, SDPA limited to CUDA_ATTENTION_BACKENDS.
    torch's sdpa_kernel sets process-wide flags until the pass ends: passes run on one thread."""
    return sdpa_kernel(CUDA_ATTENTION_BACKENDS) if device.type == "cuda" else contextlib.nullcontext()


class TargetModel:
    """Scores token trees with one forward pass per round; holds no per-session state.

    Every pass is the model's own forward (its `logits_to_keep` rows), given the tree's mask
    within each layer's window (layer_masks.py) and the tree's positions: the logits are what
    the model computes after its decoder, whatever it applies there (logit scaling, soft caps).
    """

    def __init__(self, model: PreTrainedModel, name: str) -> None:
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size: int = model.config.vocab_size
        self.context_length: int = model.config.max_position_embeddings
        self.layers = layer_windows(model.config)
        # On CPU the linear layers of this model's passes run weight first (linear_layout.py)
        # unless tune_pass_sizes timed F.linear faster; elsewhere they are left as they are.
        self.linear_switch = linear_switch(model) if self.device.type == "cpu" else None
        self.weight_first = self.linear_switch is not None
        # pass_tokens[r - 1]: the tokens a lone pass of r real tokens runs with (padding the
        # rest); past its end, r itself.
        self.pass_tokens: list[int] = [1]
        # pass_seconds[r - 1]: what a lone pass of r real tokens took, padded, after
        # pass_context_tokens cached ones, as tune_pass_sizes timed it (empty: not timed).
        self.pass_seconds: list[float] = []
        self.pass_context_tokens = 0

    @property
    def min_pass_tokens(self) -> int:
        """The token rows a batched pass has at least: CPU_MIN_PASS_TOKENS through F.linear on CPU."""
        return CPU_MIN_PASS_TOKENS if self.linear_switch is not None and not self.weight_first else 1

    def kernels(self) -> contextlib.AbstractContextManager:
        """The context every pass of this target runs in: its attention kernels and its linear layout."""
        stack = contextlib.ExitStack()
        stack.enter_context(attention_kernels(self.device))
        if self.linear_switch is not None:
            stack.enter_context(self.linear_switch.set(self.weight_first))
        return stack

    def new_cache(self) -> KVCache:
        return KVCache(self.model.config)

    @torch.inference_mode()
    def score(self, cache: KVCache, pending: Sequence[int], tree: TokenTree) -> torch.Tensor:
        """Append the pending tokens (committed, not yet cached; at least one, the last being the
        tree's root) and the tree's n nodes to the cache in ONE forward pass with the tree mask
        (within each layer's window: layer_masks.py). Return [n+1, vocab] float32 logits on the CPU: row 0 after the root, row i+1 after node i.

        Only those rows go through the output head. A pass may be padded (to pass_tokens[real -
        1] tokens: pass_sizes.py) with tokens no real token attends to. The cache grows by
        exactly len(pending) + n entries: the pending tokens, then the nodes in node order (see
        KVCache.keep for keeping one path).
        """
        start, n = len(cache), len(tree)
        real = len(pending) + n
        mask = tree_attention_mask(tree, start, len(pending))  # [real, start + real]
        positions = tree_position_ids(tree, start, len(pending))  # [real]
        ids = [*pending, *tree.tokens.tolist()]
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
        """Time lone passes of 1..max_tokens tokens after a context of context_tokens (the
        fastest of `repeats`, sizes and, on CPU, both linear layouts interleaved so that a burst
        of contention hits them alike). Keep the layout whose passes, each padded to the fastest
        size at or above it (pass_sizes.py), take less time summed over the sizes, and pad so
        from now on; those padded seconds become pass_seconds. Returns the kept layout's seconds
        measured, unpadded."""
        layouts = [True, False] if self.linear_switch is not None else [self.weight_first]
        self.pass_tokens = []  # time the sizes themselves, unpadded
        best = {layout: [float("inf")] * max_tokens for layout in layouts}
        cache = self.new_cache()
        self.score(cache, [1] * context_tokens, chain([]))
        for _ in range(repeats):
            for size in range(1, max_tokens + 1):
                for layout in layouts:
                    self.weight_first = layout
                    started = time.perf_counter()
                    self.score(cache, [1], chain([1] * (size - 1)))
                    best[layout][size - 1] = min(best[layout][size - 1], time.perf_counter() - started)
                    cache.truncate(context_tokens)
        sizes = {layout: fastest_at_least(best[layout]) for layout in layouts}
        padded = {layout: [best[layout][size - 1] for size in sizes[layout]] for layout in layouts}
        self.weight_first = min(layouts, key=lambda layout: sum(padded[layout]))
        self.pass_tokens = sizes[self.weight_first]
        self.pass_seconds = padded[self.weight_first]
        self.pass_context_tokens = context_tokens
        return best[self.weight_first]
