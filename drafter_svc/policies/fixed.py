"""`fixed`: every round sends the request's draft length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from drafter_svc.draft import Draft
from drafter_svc.policies.draft_length_policy import DraftLengthPolicy
from drafter_svc.policies.session_estimates import SessionEstimates


class FixedPolicy(DraftLengthPolicy):
    """d = num_draft_tokens, every round, the first included."""

    name: ClassVar[str] = "fixed"
    adaptive: ClassVar[bool] = False

    def depth(
        self, session: SessionEstimates, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float, copied: bool,
    ) -> int:
        return max_depth
