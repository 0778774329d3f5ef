"""What a drafter needs to know of the verifier serving a generation."""

from __future__ import annotations

from dataclasses import dataclass

from specdec.round_price import RoundPrice


@dataclass(frozen=True)
class VerifierInfo:
    """The verifier's tokens that end a generation and its context limit; the price of a new
    session's first round and the sessions open there, as its ModelInfo last said."""

    eos_token_ids: frozenset[int]
    context_length: int
    price: RoundPrice = RoundPrice()
    open_sessions: int = 0
    sends_prompt_cache: bool = False  # it answers OpenSession.return_prompt_cache (ModelInfo)
