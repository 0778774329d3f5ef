"""What one target pass does with the rounds the planner took, besides scoring them: the record
of the pass (metrics; the verifier's pass-cost fit, pass_price.py, learns from decode passes) and
the prefix of a round's tree that a hard limit keeps (batch_planner.kept_nodes)."""

from __future__ import annotations

from dataclasses import dataclass

from verifier_svc.session import RoundInput, Session


@dataclass(frozen=True)
class PassRecord:
    """What one pass did, for metrics and for the verdicts: rounds in it, new tokens, the waits
    of its rounds, seconds; its shape (rows = its rounds' new-token rows, packed one after
    another: batched_pass.py; slots = the cached entries its attention reads, summed over its
    rounds)."""

    rounds: int
    tokens: int
    waits: list[float]
    seconds: float
    rows: int = 0
    slots: int = 0


def prune(round_: RoundInput, nodes: int) -> RoundInput:
    """The round's first `nodes` nodes: still a valid token tree (parents come before their
    children), each node with its own q, and later siblings only dropped, so the exact rule
    stays exact over it (a node's verdict depends only on its ancestors and earlier siblings).
    Verdict node indices are the same in both trees."""
    if len(round_.tokens) <= nodes:
        return round_
    return RoundInput(round_.tokens[:nodes], round_.parents[:nodes], round_.q_token_ids[:nodes], round_.q_probs[:nodes])


def cached_entries(session: Session) -> int:
    """Entries in a session's cache (0 once it has ended and freed its cache)."""
    return session.cached_tokens() if session.cache is not None else 0
