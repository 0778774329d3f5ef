"""The interface every draft-length policy implements: the depth to send of a drafted tree, and
whether a model drafter should pay for its next step. Policies read the session's estimates
(session_estimates.py) and change nothing but the probe flag."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

from drafter_svc.draft import Draft
from drafter_svc.policies.session_estimates import SessionEstimates


class DraftLengthPolicy(Protocol):
    """One policy's rules. Concrete policies subclass this Protocol to inherit its defaults."""

    name: ClassVar[str]
    # It prices rounds: under load it may send empty rounds (SessionPolicy.may_draft), and it
    # probes after declining.
    prices_rounds: ClassVar[bool] = False
    # It may cut a round short of the request's draft length, so a model drafter may leave a long
    # prompt's first round undrafted (generation.py).
    adaptive: ClassVar[bool] = True

    def depth(
        self, session: SessionEstimates, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float, copied: bool,
    ) -> int:
        """The depth to send of `draft` (its non-empty primary path `path`, drafted at most
        max_depth deep; by a model drafter at `step_seconds` a step, 0 for a free drafter;
        copied: a hybrid session's copy draft)."""
        ...

    def keep_drafting(
        self, session: SessionEstimates, chain: Draft, max_depth: int, max_nodes: int, step_seconds: float,
        catch_up_seconds: float, reads_prompt: bool,
    ) -> bool:
        """Whether a model drafter that has drafted `chain` (j < max_depth tokens) should pay for
        token j + 1 (drafter.KeepDrafting's arguments; default: always, up to max_depth)."""
        return True

    def send_copy(
        self, session: SessionEstimates, copy_draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float | None, catch_up_seconds: float, reads_prompt: bool,
    ) -> bool:
        """Whether a hybrid session sends its copy draft (non-empty primary path `path`) rather
        than drafting with its model (default: whenever there is one). step_seconds None: the
        model cannot draft this round."""
        return True
