"""`copy-confidence`: a long match predicts a long copy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from drafter_svc.draft import Draft
from drafter_svc.policies.draft_length_policy import DraftLengthPolicy
from drafter_svc.policies.session_estimates import SessionEstimates


class CopyConfidencePolicy(DraftLengthPolicy):
    """d = the length of the context suffix the first token's prediction rests on (a copy draft's
    matched suffix, an n-gram draft's context), at most the draft length; the whole draft length
    for a draft that does not say."""

    name: ClassVar[str] = "copy-confidence"

    def depth(
        self, session: SessionEstimates, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float, copied: bool,
    ) -> int:
        return min(max_depth, draft.match_lengths[path[0]]) if draft.match_lengths else max_depth
