"""A round as the verifier receives it: the drafted token tree with each node's q (RoundInput),
the verifier's limits on it, its validation (InvalidArgument naming the first problem, as
the wire's field path), and the validated round ready for its target pass (PreparedRound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from specdec.errors import InvalidArgument
from verifier_svc.token_tree import ROOT, TokenTree, build_tree

# How far a declared q may be from summing to 1 (float32 on the wire).
Q_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class RoundInput:
    """A drafted token tree: node i holds tokens[i], hangs under parents[i] (ROOT = -1, or an
    earlier node) and was sampled from q_i = (q_token_ids[i], q_probs[i])."""

    tokens: list[int]
    parents: list[int]
    q_token_ids: list[list[int]]
    q_probs: list[list[float]]

    @staticmethod
    def point_masses(tokens: list[int], parents: list[int] | None = None) -> RoundInput:
        """A deterministic drafter's round; without parents, a chain."""
        tree = list(range(ROOT, len(tokens) - 1)) if parents is None else parents
        return RoundInput(tokens, tree, [[t] for t in tokens], [[1.0] for _ in tokens])


@dataclass(frozen=True)
class Limits:
    max_draft_tokens: int  # nodes per round
    max_draft_depth: int  # nodes on one root-to-leaf path
    context_length: int


@dataclass(frozen=True)
class PreparedRound:
    """A validated round, ready for its target pass."""

    round: RoundInput
    tree: TokenTree
    q_ids: torch.Tensor  # [n, S]
    q_probs: torch.Tensor  # [n, S]
    start: int  # cache length before the pass
    pending: list[int]  # committed tokens not yet cached; the last one is the tree's root
    # An empty round's [1, vocab] logits, scored before it arrived (Session.run_ahead): no pass;
    # pending is then empty (the root is cached).
    ahead: torch.Tensor | None = None

    def cut(self, prefix: RoundInput) -> PreparedRound:
        """This round with only `prefix`, its first nodes (round_pass.prune), each with its q:
        no validation again (a prefix of a valid round is valid)."""
        n = len(prefix.tokens)
        return replace(self, round=prefix, tree=build_tree(prefix.tokens, prefix.parents), q_ids=self.q_ids[:n], q_probs=self.q_probs[:n])


def checked_tree(round_: RoundInput, limits: Limits, vocab_size: int) -> TokenTree:
    """The round's tree, or InvalidArgument naming the first problem."""
    n = len(round_.tokens)
    if n > limits.max_draft_tokens:
        raise InvalidArgument("round.nodes", f"{n} nodes exceed this verifier's limit of {limits.max_draft_tokens}")
    if len(round_.parents) != n:
        raise InvalidArgument("round.nodes.parent", "every node needs its parent")
    depths: list[int] = []
    for i, parent in enumerate(round_.parents):
        field = f"round.nodes[{i}].parent"
        if parent == i:
            raise InvalidArgument(field, f"node {i} is its own parent (a cycle)")
        if not ROOT <= parent < n:
            raise InvalidArgument(field, f"{parent} is out of range: a parent is -1 (the root) or a node index in [0, {n})")
        if parent > i:
            raise InvalidArgument(field, f"parent {parent} comes after node {i}: parents must come before their children (no cycles)")
        depths.append(1 if parent == ROOT else depths[parent] + 1)
        if depths[i] > limits.max_draft_depth:
            raise InvalidArgument("round.nodes", f"node {i} is at depth {depths[i]}, beyond this verifier's limit of {limits.max_draft_depth}")
    check_ids(round_.tokens, vocab_size, "round.nodes.token_id")
    return build_tree(round_.tokens, round_.parents)


def check_ids(ids: Sequence[int] | torch.Tensor, vocab_size: int, field: str) -> None:
    if isinstance(ids, torch.Tensor):
        outside = ids[(ids < 0) | (ids >= vocab_size)].tolist()
    else:  # plain Python: the prompt is checked on the event loop's thread, which runs no tensor op (scheduler.py)
        outside = [t for t in ids if not 0 <= t < vocab_size]
    if outside:
        raise InvalidArgument(field, f"token id {int(outside[0])} is outside the vocabulary [0, {vocab_size})")


def q_tensors(round_: RoundInput, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate each declared q and pad them to [k, S] tensors (padding: id 0, probability 0)."""
    k = len(round_.tokens)
    if len(round_.q_token_ids) != k or len(round_.q_probs) != k:
        raise InvalidArgument("round.nodes.q", "every node needs its q")
    width = max((len(ids) for ids in round_.q_token_ids), default=1)
    q_ids = torch.zeros((k, width), dtype=torch.long)
    q_probs = torch.zeros((k, width), dtype=torch.float32)
    for i, (token, ids, probs) in enumerate(zip(round_.tokens, round_.q_token_ids, round_.q_probs)):
        # Checked as tensors: a sampled q has thousands of entries (a Python loop over them cost
        # ~1 ms per node).
        field = f"round.nodes[{i}].q"
        if not ids or len(ids) != len(probs):
            raise InvalidArgument(field, "token_ids and probs must be non-empty and of equal length")
        ids_t, probs_t = torch.tensor(ids, dtype=torch.long), torch.tensor(probs, dtype=torch.float64)
        check_ids(ids_t, vocab_size, f"{field}.token_ids")
        if torch.unique(ids_t).numel() != len(ids):
            raise InvalidArgument(f"{field}.token_ids", "token ids must be distinct")
        if not bool((probs_t.isfinite() & (probs_t >= 0) & (probs_t <= 1)).all()):
            raise InvalidArgument(f"{field}.probs", "probabilities must be finite and in [0, 1]")
        total = float(probs_t.sum())
        if abs(total - 1.0) > Q_SUM_TOLERANCE:
            raise InvalidArgument(f"{field}.probs", f"q is not a distribution: it sums to {total:.6f}")
        drafted = ids_t == token
        if not bool(drafted.any()) or float(probs_t[drafted].max()) <= 0:
            raise InvalidArgument(field, f"q gives no probability to its drafted token {token}")
        q_ids[i, : len(ids)] = ids_t
        q_probs[i, : len(probs)] = probs_t.float()
    return q_ids, q_probs
