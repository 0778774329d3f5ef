"""The target model's forward pass over a round's new tokens, on top of a session's cache."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from verifier_svc.kv_cache import KVCache

# On CPU, BLAS runs matrix products with 2 or 3 rows 2-3x slower than with 4 (measured with
# torch 2.13's MKL on a 2-core AMD EPYC: the model's linear layers take 10 ms for 1 row, 23 ms
# for 2, 34 ms for 3, 17 ms for 4), so a 2- or 3-token pass is padded to this many tokens.
CPU_MIN_PASS_TOKENS = 4


class TargetModel:
    """Scores continuations with one forward pass per round; holds no per-session state."""

    def __init__(self, model: PreTrainedModel, name: str) -> None:
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size: int = model.config.vocab_size
        self.context_length: int = model.config.max_position_embeddings
        self.min_pass_tokens = CPU_MIN_PASS_TOKENS if self.device.type == "cpu" else 1

    def new_cache(self) -> KVCache:
        return KVCache(self.model.config)

    @torch.inference_mode()
    def score(self, cache: KVCache, token_ids: Sequence[int], num_logits: int) -> torch.Tensor:
        """Append token_ids to the cache in ONE forward pass; return the logits of the last
        num_logits positions, [num_logits, vocab] float32 on the CPU.

        Only those positions go through the output head (a prefill needs just its last rows).
        A short pass may be padded (see CPU_MIN_PASS_TOKENS) by repeating its last token after
        the real ones: the causal mask hides the padding from them, and its cache entries are
        dropped before returning, so the cache grows by exactly len(token_ids).
        """
        start, real = len(cache), len(token_ids)
        fits = start + self.min_pass_tokens <= self.context_length
        padding = self.min_pass_tokens - real if 1 < real < self.min_pass_tokens and fits else 0
        ids = [*token_ids, *[token_ids[-1]] * padding]
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        position_ids = torch.arange(start, start + len(ids), device=self.device).unsqueeze(0)
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            past_key_values=cache.cache,
            use_cache=True,
            logits_to_keep=num_logits + padding,
        )
        cache.truncate(start + real)
        return out.logits[0, :num_logits].float().cpu()  # the kept rows end with the padding
