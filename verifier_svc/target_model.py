"""The target model's forward pass over a round's new tokens, on top of a session's cache."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from verifier_svc.kv_cache import KVCache


class TargetModel:
    """Scores continuations with one forward pass per round; holds no per-session state."""

    def __init__(self, model: PreTrainedModel, name: str) -> None:
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size: int = model.config.vocab_size
        self.context_length: int = model.config.max_position_embeddings

    def new_cache(self) -> KVCache:
        return KVCache(self.model.config)

    @torch.inference_mode()
    def score(self, cache: KVCache, token_ids: Sequence[int], num_logits: int) -> torch.Tensor:
        """Append token_ids to the cache in ONE forward pass; return the logits of the last
        num_logits positions, [num_logits, vocab] float32 on the CPU.

        Only those positions go through the output head (a prefill needs just its last rows).
        """
        start = len(cache)
        input_ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
        position_ids = torch.arange(start, start + len(token_ids), device=self.device).unsqueeze(0)
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            past_key_values=cache.cache,
            use_cache=True,
            logits_to_keep=num_logits,
        )
        return out.logits[0, -num_logits:].float().cpu()
