"""A round as the verifier receives it: the drafted token tree with each node's q (RoundInput),
the verifier's limits on it, its validation (InvalidArgument naming the first problem, as
the wire's field path), and the validated round ready for its target pass (PreparedRound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
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
    """Validate each declared q and pad them to [k, S] tensors (padding: id 0, probability 0).
    The error names the first node with a problem, and that node's first problem, in the order
    checked_q lists them."""
    k = len(round_.tokens)
    if len(round_.q_token_ids) != k or len(round_.q_probs) != k:
        raise InvalidArgument("round.nodes.q", "every node needs its q")
    # The nodes before the first one whose lists are malformed are checked together, in numpy: a
    # loop of tensor ops per node cost ~85 us a node even for a point mass (0.7 ms of an 8-node
    # round at temperature 0, on the pass's thread).
    lengths = [len(ids) for ids in round_.q_token_ids]
    malformed = next((i for i, (n, probs) in enumerate(zip(lengths, round_.q_probs)) if not n or n != len(probs)), k)
    q_ids = np.zeros((k, max(lengths, default=1)), dtype=np.int64)
    q_probs = np.zeros(q_ids.shape, dtype=np.float32)
    if malformed:
        sizes = np.asarray(lengths[:malformed])
        rows = np.repeat(np.arange(malformed), sizes)
        columns = np.arange(len(rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        ids = np.fromiter((t for node in round_.q_token_ids[:malformed] for t in node), dtype=np.int64, count=len(rows))
        probs = np.fromiter((p for node in round_.q_probs[:malformed] for p in node), dtype=np.float64, count=len(rows))
        checked_q(round_.tokens[:malformed], rows, ids, probs, vocab_size)
        q_ids[rows, columns] = ids
        q_probs[rows, columns] = probs
    if malformed < k:
        raise InvalidArgument(f"round.nodes[{malformed}].q", "token_ids and probs must be non-empty and of equal length")
    return torch.from_numpy(q_ids), torch.from_numpy(q_probs)


def checked_q(tokens: Sequence[int], rows: np.ndarray, ids: np.ndarray, probs: np.ndarray, vocab_size: int) -> None:
    """InvalidArgument for the first node whose q (its entries: ids[rows == node], probs[...])
    fails, naming its first failed check: ids inside the vocabulary, ids distinct, probabilities
    finite and in [0, 1], summing to 1 within Q_SUM_TOLERANCE, and some probability on the
    drafted token."""
    n = len(tokens)
    outside = (ids < 0) | (ids >= vocab_size)
    # Distinct within a node: keys that cannot collide across nodes (ids clamped into the node's band).
    keys = np.sort(rows * (vocab_size + 2) + np.clip(ids, -1, vocab_size) + 1)
    repeated = keys[1:][keys[1:] == keys[:-1]] // (vocab_size + 2)
    bad_probs = ~(np.isfinite(probs) & (probs >= 0) & (probs <= 1))
    totals = np.bincount(rows, weights=probs, minlength=n)
    on_token = (ids == np.asarray(tokens, dtype=np.int64)[rows]) & (probs > 0)
    failed = np.zeros((n, 5), dtype=bool)
    failed[rows[outside], 0] = True
    failed[repeated, 1] = True
    failed[rows[bad_probs], 2] = True
    failed[:, 3] = ~(np.abs(totals - 1.0) <= Q_SUM_TOLERANCE)  # a NaN total fails too (its node failed check 2 first)
    failed[:, 4] = np.bincount(rows[on_token], minlength=n) == 0
    if not failed.any():
        return
    node = int(np.flatnonzero(failed.any(axis=1))[0])
    check = int(np.flatnonzero(failed[node])[0])
    field = f"round.nodes[{node}].q"
    if check == 0:
        check_ids(ids[rows == node].tolist(), vocab_size, f"{field}.token_ids")
    if check == 1:
        raise InvalidArgument(f"{field}.token_ids", "token ids must be distinct")
    if check == 2:
        raise InvalidArgument(f"{field}.probs", "probabilities must be finite and in [0, 1]")
    if check == 3:
        raise InvalidArgument(f"{field}.probs", f"q is not a distribution: it sums to {float(totals[node]):.6f}")
    raise InvalidArgument(field, f"q gives no probability to its drafted token {tokens[node]}")
