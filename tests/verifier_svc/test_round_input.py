"""q_tensors: every node's q checked at once, against the rule checked node by node.

The reference below is the rule as it reads: the nodes in order, each node's checks in order,
the first failure raised. q_tensors must give the same tensors for a valid round and the same
error (field and message) for an invalid one, whatever mix of problems a round holds.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from specdec.errors import InvalidArgument
from verifier_svc.round_input import Q_SUM_TOLERANCE, RoundInput, q_tensors

VOCAB = 50


def reference(round_: RoundInput, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    k = len(round_.tokens)
    if len(round_.q_token_ids) != k or len(round_.q_probs) != k:
        raise InvalidArgument("round.nodes.q", "every node needs its q")
    width = max((len(ids) for ids in round_.q_token_ids), default=1)
    q_ids = torch.zeros((k, width), dtype=torch.long)
    q_probs = torch.zeros((k, width), dtype=torch.float32)
    for i, (token, ids, probs) in enumerate(zip(round_.tokens, round_.q_token_ids, round_.q_probs)):
        field = f"round.nodes[{i}].q"
        if not ids or len(ids) != len(probs):
            raise InvalidArgument(field, "token_ids and probs must be non-empty and of equal length")
        outside = [t for t in ids if not 0 <= t < vocab_size]
        if outside:
            raise InvalidArgument(f"{field}.token_ids", f"token id {outside[0]} is outside the vocabulary [0, {vocab_size})")
        if len(set(ids)) != len(ids):
            raise InvalidArgument(f"{field}.token_ids", "token ids must be distinct")
        if not all(math.isfinite(p) and 0 <= p <= 1 for p in probs):
            raise InvalidArgument(f"{field}.probs", "probabilities must be finite and in [0, 1]")
        total = float(torch.tensor(probs, dtype=torch.float64).sum())
        if abs(total - 1.0) > Q_SUM_TOLERANCE:
            raise InvalidArgument(f"{field}.probs", f"q is not a distribution: it sums to {total:.6f}")
        if not any(t == token and p > 0 for t, p in zip(ids, probs)):
            raise InvalidArgument(field, f"q gives no probability to its drafted token {token}")
        q_ids[i, : len(ids)] = torch.tensor(ids)
        q_probs[i, : len(probs)] = torch.tensor(probs, dtype=torch.float64).float()
    return q_ids, q_probs


def outcome(fn, round_: RoundInput) -> tuple:  # type: ignore[no-untyped-def]
    try:
        q_ids, q_probs = fn(round_, VOCAB)
    except InvalidArgument as error:
        return ("error", error.field, str(error))
    return ("ok", q_ids.tolist(), q_probs.tolist(), q_ids.dtype, q_probs.dtype)


def node(rng: random.Random, spoil: str | None) -> tuple[int, list[int], list[float]]:
    """A node's (token, q ids, q probs): a valid sparse q, or one spoiled one way."""
    ids = rng.sample(range(VOCAB), rng.randint(1, 6))
    weights = [rng.random() + 0.01 for _ in ids]
    probs = [w / sum(weights) for w in weights]
    token = rng.choice(ids)
    if spoil == "empty":
        ids, probs = [], []
    elif spoil == "lengths":
        probs = probs + [0.0]
    elif spoil == "outside":
        ids[rng.randrange(len(ids))] = rng.choice([-3, VOCAB, VOCAB + 7])
    elif spoil == "repeated" and len(ids) > 1:
        ids[1] = ids[0]
    elif spoil == "nan":
        probs[rng.randrange(len(probs))] = rng.choice([math.nan, math.inf, -0.5, 1.5])
    elif spoil == "sum":
        probs = [p * 0.5 for p in probs]
    elif spoil == "token":
        token = next(t for t in range(VOCAB) if t not in ids)
    elif spoil == "zero" and len(ids) > 1:
        i = ids.index(token)
        probs[(i + 1) % len(ids)] += probs[i]
        probs[i] = 0.0
    return token, ids, probs


@pytest.mark.parametrize("seed", range(300))
def test_same_tensors_or_same_error_as_node_by_node(seed: int) -> None:
    rng = random.Random(seed)
    spoils = [None, None, None, "empty", "lengths", "outside", "repeated", "nan", "sum", "token", "zero"]
    nodes = [node(rng, rng.choice(spoils) if rng.random() < 0.3 else None) for _ in range(rng.randint(0, 8))]
    round_ = RoundInput([t for t, _, _ in nodes], list(range(-1, len(nodes) - 1)), [i for _, i, _ in nodes], [p for _, _, p in nodes])
    assert outcome(q_tensors, round_) == outcome(reference, round_)


def test_point_masses_pad_nothing() -> None:
    q_ids, q_probs = q_tensors(RoundInput.point_masses([4, 9, 4]), VOCAB)
    assert q_ids.tolist() == [[4], [9], [4]] and q_probs.tolist() == [[1.0], [1.0], [1.0]]


def test_the_first_node_with_a_problem_is_named_with_its_first_problem() -> None:
    # Node 0 sums to 0.5; node 1 has an id outside the vocabulary (checked before sums).
    round_ = RoundInput([1, 2], [-1, 0], [[1, 3], [2, VOCAB]], [[0.25, 0.25], [0.5, 0.5]])
    with pytest.raises(InvalidArgument) as error:
        q_tensors(round_, VOCAB)
    assert error.value.field == "round.nodes[0].q.probs" and "sums to 0.500000" in str(error.value)
    # A malformed node after a bad one: the bad one is named.
    round_ = RoundInput([1, 2], [-1, 0], [[1, 1], []], [[0.5, 0.5], []])
    with pytest.raises(InvalidArgument) as error:
        q_tensors(round_, VOCAB)
    assert error.value.field == "round.nodes[0].q.token_ids"
