"""The grammar along the chain a model drafter is drafting (torch-free): what it may draw next,
and the tokens the grammar then forces, so that a constrained session's model drafts stay in the
grammar instead of being cut by it (grammar_drafts.GrammarDrafts.fit).

A guide holds the session's grammar matcher advanced past the round's context (the committed
tokens and the round's forced tokens) and, as the drafter goes, past each token of its chain.
`mask(logits)` sets the scores of the tokens the grammar forbids there to -inf, so a q computed
from them (draft_sampling.draft_distribution) is the model's q restricted to the allowed tokens
and renormalized, which is what the node is then drawn from and declares: exactness holds for
any q (Leviathan et al., 2023), and this one is the closest to the masked target the verifier
checks against. `advance(token, room)` consumes a drawn token and returns the tokens the grammar
forces after it (llguidance's fast-forward tokens, at most `room`, no EOS), consumed too: the
drafter appends them to its chain as point masses, at the cost of reading them in its next model
call instead of one step each. `release()` returns the matcher to the committed tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import llguidance


class DraftGuide:
    """One round's walk of the matcher down a drafted chain; `release` undoes all of it.
    `allowed(matcher)` is the [vocab] bool mask of the tokens the matcher allows next."""

    def __init__(
        self, matcher: llguidance.LLMatcher, allowed: Callable[[llguidance.LLMatcher], np.ndarray], eos_token_ids: frozenset[int],
        consumed: int = 0,
    ) -> None:
        self.matcher = matcher
        self.allowed = allowed
        self.eos_token_ids = eos_token_ids
        self.consumed = consumed  # tokens consumed past the committed ones, undone by release
        self.ended = matcher.is_stopped()
        self.walked = 0  # chain tokens advanced past: drawn and forced
        self.forced_depths: list[int] = []  # the chain depths (1 = the first) of the forced tokens

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """logits [vocab] with the tokens the grammar forbids next at -inf (a float32 copy);
        scores past the grammar's vocabulary are forbidden too."""
        allowed = self.allowed(self.matcher)
        masked = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
        width = min(allowed.shape[0], masked.shape[0])
        keep = np.flatnonzero(allowed[:width])
        masked[keep] = logits[keep]
        return masked

    def advance(self, token: int, room: int) -> list[int]:
        """Consume `token` (allowed by the last mask) and return up to `room` tokens the grammar
        forces after it, consumed as well; none after an EOS, which ends the walk (`ended`)."""
        if token in self.eos_token_ids:
            self.ended = True
            return []
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the drafter's grammar matcher refused drafted token {token}: {self.matcher.get_error()}")
        self.consumed += 1
        self.walked += 1
        if room <= 0 or self.matcher.is_stopped():
            self.ended = self.matcher.is_stopped()
            return []
        forced = self.matcher.compute_ff_tokens()[:room]
        forced = forced[: next((i for i, t in enumerate(forced) if t in self.eos_token_ids), len(forced))]
        if forced and not self.matcher.consume_tokens(forced):
            raise RuntimeError(f"the drafter's grammar matcher refused its forced tokens {forced}: {self.matcher.get_error()}")
        self.consumed += len(forced)
        self.forced_depths += range(self.walked + 1, self.walked + len(forced) + 1)
        self.walked += len(forced)
        return forced

    def release(self) -> None:
        """Roll the matcher back to where it was before the guide consumed anything."""
        if self.consumed:
            self.matcher.rollback(self.consumed)
        self.consumed = 0
