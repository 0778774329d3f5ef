"""The drafter interface: propose a continuation, learn from the verifier's verdict.

Shaped like Hugging Face's `CandidateGenerator`: `propose(context, budget) -> Draft` and
`observe(feedback)`. A draft carries the distribution q each token was drawn from, which the
verifier needs for exact acceptance (Algorithm 1 of Leviathan et al., 2023); the zero-cost
drafters here are deterministic and declare point masses. An empty draft means "decode normally".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Draft:
    """Proposed continuation: token_ids[i] was drawn from the distribution q_i, given sparsely as
    (q_token_ids[i], q_probs[i]); q_probs[i] sums to 1 and q_token_ids[i] contains token_ids[i].
    A deterministic drafter declares a point mass ([t], [1.0]). Empty draft = decode normally.
    """

    token_ids: list[int]
    q_token_ids: list[list[int]]
    q_probs: list[list[float]]

    def __post_init__(self) -> None:
        if not len(self.token_ids) == len(self.q_token_ids) == len(self.q_probs):
            raise ValueError("token_ids, q_token_ids and q_probs must have one entry per drafted token")
        for token, ids, probs in zip(self.token_ids, self.q_token_ids, self.q_probs):
            if len(ids) != len(probs) or token not in ids:
                raise ValueError("each q must list its drafted token, with one probability per token id")

    @staticmethod
    def point_masses(token_ids: Sequence[int]) -> Draft:
        """The draft of a deterministic drafter: q_i puts all its mass on token_ids[i]."""
        ids = [int(t) for t in token_ids]
        return Draft(ids, [[t] for t in ids], [[1.0] for _ in ids])

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class Feedback:
    """What the verifier did with the last draft.

    emitted_token_ids are the tokens appended to the context this round: the accepted drafted
    tokens followed by the recovered (after a rejection) or bonus (after full acceptance) token.
    """

    num_drafted: int
    num_accepted: int
    acceptance_probs: list[float]  # min(1, p/q) per drafted token
    emitted_token_ids: list[int]


class Drafter(Protocol):
    """One object per generation session; it may keep incremental state between calls."""

    def propose(self, context: Sequence[int], budget: int) -> Draft:
        """Draft at most `budget` (>= 0) tokens to follow `context`, the whole sequence so far
        (prompt + generated). Within a session the context only grows, by the emitted tokens."""
        ...

    def observe(self, feedback: Feedback) -> None:
        """Learn from the verifier's verdict on the last draft."""
        ...


DRAFTER_NAMES: tuple[str, ...] = ("copy", "ngram")


def make_drafter(name: str) -> Drafter:
    """A fresh drafter for one session, by its name in DRAFTER_NAMES; ValueError for any other."""
    # Imported here: the drafters import Draft from this module.
    from drafter_svc.copy_drafter import CopyDrafter
    from drafter_svc.ngram_drafter import NgramDrafter

    if name == "copy":
        return CopyDrafter()
    if name == "ngram":
        return NgramDrafter()
    raise ValueError(f"unknown drafter {name!r}; expected one of {', '.join(DRAFTER_NAMES)}")


class AppendOnlyCursor:
    """How far a drafter has indexed an append-only context, and whether a new context extends it.

    The check compares the length and the last `window` indexed tokens, O(window) rather than
    O(len(context)): the session contract is append-only, and this catches the ways it could be
    broken in practice (a new session's context, a rollback). On failure the drafter re-indexes.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.length = 0
        self._tail: list[int] = []

    def extended_by(self, context: Sequence[int]) -> bool:
        start = self.length - len(self._tail)
        return len(context) >= self.length and list(context[start : self.length]) == self._tail

    def advance(self, context: Sequence[int]) -> None:
        self.length = len(context)
        self._tail = list(context[max(0, self.length - self.window) : self.length])

    def reset(self) -> None:
        self.length = 0
        self._tail = []
