"""A model drafter's draft from its chain: each node's q as the Draft carries it, the Draft
itself, and how many siblings go to the chain's first depths (onnx_drafter.py)."""

from __future__ import annotations

from collections.abc import Sequence

from drafter_svc.acceptance_predictor import q_entropy
from drafter_svc.draft import Draft
from drafter_svc.draft_sampling import SparseQ

# Siblings go to depths 1..BRANCH_DEPTHS, one at a time, shallowest first: the first drafts are
# the likeliest to be reached, so their alternatives are worth the most. Measured: at
# temperature 0 they help a little; at temperature 1 leaf siblings drawn from a q close to p are
# tried in random order with the chain's node and often end the walk early (int8 drafter, k4-t8:
# 0.66x vs 1.28x for the chain; docs/design/trees-vs-chains.md). Exact either way. Under the race the
# runners-up cannot end the walk early, but one at depth 1 did not pay either: the first
# position's acceptance went from 0.95 to 1.00 and the rounds from 410 to 408 for 2,330 tokens,
# for 3 ms more per pass (39.2 against 38.8 ms per token).
BRANCH_DEPTHS = 2
NodeQ = tuple[list[int], list[float], float]  # a node's q as a Draft carries it: token ids, probabilities, entropy


def node_q(q: SparseQ) -> NodeQ:
    """`q` as a Draft carries it: its token ids, probabilities and entropy."""
    return (*q.lists(), q_entropy(q.probs))


def draft_of(token_ids: list[int], parents: list[int], qs: Sequence[NodeQ], confidences: Sequence[float]) -> Draft:
    """The Draft of these nodes (token, parent index, q, the model's confidence in each)."""
    return Draft(
        token_ids, parents, [ids for ids, _, _ in qs], [probs for _, probs, _ in qs], confidences=list(confidences),
        q_entropies=[e for _, _, e in qs],
    )


def siblings_per_depth(extra: int, depths: int) -> list[int]:
    """`extra` sibling nodes dealt round-robin over depths 1..depths: counts per depth."""
    if extra <= 0 or depths <= 0:
        return []
    return [extra // depths + (1 if d < extra % depths else 0) for d in range(depths)]
