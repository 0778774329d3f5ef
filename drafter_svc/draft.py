"""What a drafter proposes and what it hears back: a draft (a token tree with the q each node was
drawn from) and the verifier's feedback on it.

A draft carries the distribution q each token was drawn from, which the verifier needs for exact
acceptance (Algorithm 1 of Leviathan et al., 2023; over trees, Stratos' section 2.1); the
zero-cost drafters are deterministic and declare point masses. An empty draft means "decode
normally".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ROOT = -1  # the parent index of a node that follows the context's last token


@dataclass(frozen=True)
class Draft:
    """A proposed token tree (a chain is a tree with one child per node).

    Node i holds token_ids[i]; its parent is parents[i]: ROOT (-1) for a node that follows the
    context directly, else an earlier node (parents[i] < i). Token i was drawn from the
    distribution q_i, given sparsely as (q_token_ids[i], q_probs[i]); q_probs[i] sums to 1 and
    q_token_ids[i] contains token_ids[i]. Siblings must be independent draws from the q they
    declare; a deterministic drafter declares point masses ([t], [1.0]) and may branch freely.
    Empty draft = decode normally.

    Optional per-node evidence the drafter had, read by draft-length policies (policies/),
    never by the verifier: match_lengths[i] is how many context tokens the prediction of node i
    rests on (the matched suffix of a copy draft, the backed-off context of an n-gram draft);
    confidences[i] is the drafter's own estimate in [0, 1] that the token comes next (an n-gram
    draft's empirical frequency, a greedy model draft's softmax probability of its token);
    q_entropies[i] is the entropy of q_i in nats, as `acceptance_predictor.q_entropy` computes
    it, by a drafter that had q as an array (a model drafter: computed once, not again from the
    lists at every policy step). Empty: unknown (computed when needed). Not part of equality:
    the same tree is the same draft.
    """

    token_ids: list[int]
    parents: list[int]
    q_token_ids: list[list[int]]
    q_probs: list[list[float]]
    match_lengths: list[int] = field(default_factory=list, compare=False)
    confidences: list[float] = field(default_factory=list, compare=False)
    q_entropies: list[float] = field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        if not len(self.token_ids) == len(self.parents) == len(self.q_token_ids) == len(self.q_probs):
            raise ValueError("token_ids, parents, q_token_ids and q_probs must have one entry per node")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}: parent {parent} must be ROOT or an earlier node")
        for token, ids, probs in zip(self.token_ids, self.q_token_ids, self.q_probs):
            if len(ids) != len(probs) or token not in ids:
                raise ValueError("each q must list its drafted token, with one probability per token id")
        for name in ("match_lengths", "confidences", "q_entropies"):
            if getattr(self, name) and len(getattr(self, name)) != len(self.token_ids):
                raise ValueError(f"{name} must be empty or have one entry per node")

    @staticmethod
    def point_masses(
        token_ids: Sequence[int],
        parents: Sequence[int] | None = None,
        match_lengths: Sequence[int] = (),
        confidences: Sequence[float] = (),
    ) -> Draft:
        """The draft of a deterministic drafter: q_i puts all its mass on token_ids[i]. Without
        parents the tokens form a chain."""
        ids = [int(t) for t in token_ids]
        tree = list(range(ROOT, len(ids) - 1)) if parents is None else [int(p) for p in parents]
        return Draft(ids, tree, [[t] for t in ids], [[1.0] for _ in ids], list(match_lengths), list(confidences))

    def __len__(self) -> int:
        return len(self.token_ids)

    def depth(self) -> int:
        """Length of the longest root-to-leaf path (0 for an empty draft)."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return max(depths, default=0)

    def path_tokens(self, nodes: Sequence[int]) -> list[int]:
        """The tokens of the given nodes, in order (e.g. the accepted path)."""
        return [self.token_ids[i] for i in nodes]


@dataclass(frozen=True)
class Feedback:
    """What the verifier did with the last draft.

    emitted_token_ids are the tokens appended to the context this round: the tokens of the
    accepted path followed by the recovered (after a rejection) or bonus (after a leaf) token.
    """

    num_drafted: int  # nodes in the draft
    accepted_nodes: list[int]  # the accepted root-to-node path, as node indices
    acceptance_probs: list[float]  # min(1, p/q) per node, p conditioned on the node's path (the race: its own)
    emitted_token_ids: list[int]

    @property
    def num_accepted(self) -> int:
        return len(self.accepted_nodes)
