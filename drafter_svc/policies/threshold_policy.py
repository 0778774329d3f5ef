"""`specdec++`: the threshold policy of SpecDec++ (Huang et al., 2024, Algorithm 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from drafter_svc.draft import Draft
from drafter_svc.policies.depth_math import threshold_depth
from drafter_svc.policies.draft_length_policy import DraftLengthPolicy
from drafter_svc.policies.session_estimates import SessionEstimates


class ThresholdPolicy(DraftLengthPolicy):
    """Add the primary path's tokens one by one while the predicted probability that some token so
    far is rejected, 1 - prod_i a_i, stays at or below the session's threshold (the process's
    stop threshold, lowered by the rounds queued ahead); the token that crosses it is still sent.
    a_i come from the online predictor (acceptance_predictor.py). A model drafter stops drafting
    where the threshold is crossed: the stopping decision is made while drafting, so the steps it
    saves are the drafter's own."""

    name: ClassVar[str] = "specdec++"

    def depth(
        self, session: SessionEstimates, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float, copied: bool,
    ) -> int:
        return threshold_depth(session.predict(draft, path, copied), session.threshold())

    def keep_drafting(
        self, session: SessionEstimates, chain: Draft, max_depth: int, max_nodes: int, step_seconds: float,
        catch_up_seconds: float, reads_prompt: bool,
    ) -> bool:
        j = len(chain)
        return j == 0 or 1.0 - float(np.prod(session.predict(chain, range(j)))) <= session.threshold()
