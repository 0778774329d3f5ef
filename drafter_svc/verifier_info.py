"""What a drafter needs to know of the verifier serving a generation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VerifierInfo:
    eos_token_ids: frozenset[int]
    context_length: int
