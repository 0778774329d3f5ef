"""What one target pass does with the rounds the scheduler took, besides scoring them.

Every decode pass (no prompt prefill in it) updates the verifier's pass-time model
(pass_time.py); each verdict comes back with the record of the pass that scored it, including
the fitted marginal seconds of one more padded token row, which is what a drafted token costs a
pass under load. In a pass of several rounds the scheduler also cuts the rounds' trees to the
width that pays by that fit and each session's measured acceptance (pass_width.py), so drafts
never make a batched pass slower per expected token than the same pass without them; a lone
round is never cut (its drafter priced it alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from verifier_svc.pass_time import PassTimeModel
from verifier_svc.pass_width import AcceptanceRate, node_gains, pass_width
from verifier_svc.session import RoundInput, Session


@dataclass(frozen=True)
class PassRecord:
    """What one pass did, for metrics and for the verdicts: rounds in it, new tokens, the waits
    of its rounds, seconds; its shape (rows = B x T padded new-token rows, slots = the cached
    entries its attention reads, summed over its rounds) and the fitted marginal seconds of one
    more row after it."""

    rounds: int
    tokens: int
    waits: list[float]
    seconds: float
    rows: int = 0
    slots: int = 0
    row_seconds: float = 0.0


def kept_nodes(
    rounds: Sequence[tuple[Session, RoundInput]],
    max_pass_rows: int,
    pass_time: PassTimeModel | None,
    rate: Callable[[Session], AcceptanceRate],
) -> list[int]:
    """How many of its nodes each round of a pass keeps: all of a lone round's; in a pass of
    several, the width that pays by `pass_time` and each session's acceptance `rate`
    (pass_width.py; None: no cut by cost), within `max_pass_rows` if set (0: off)."""
    keep = [len(round_.tokens) for _, round_ in rounds]
    if len(rounds) < 2:
        return keep
    pending = [0 if session.closed else len(session.tokens) - cached_entries(session) for session, _ in rounds]
    if max_pass_rows:
        keep = [min(k, max(0, max_pass_rows // len(rounds) - p)) for k, p in zip(keep, pending)]
    if pass_time is not None and any(keep):
        gains = [node_gains(round_.parents[:k], rate(session).alpha) for (session, round_), k in zip(rounds, keep)]
        base = max(pending)
        plain = pass_time.seconds(len(rounds) * base, len(rounds) * max(cached_entries(session) for session, _ in rounds))
        width = pass_width(pending, gains, plain, pass_time.row_seconds)
        keep = [min(k, max(0, width - p)) for k, p in zip(keep, pending)]
    return keep


def prune(round_: RoundInput, nodes: int) -> RoundInput:
    """The round's first `nodes` nodes: still a valid token tree (parents come before their
    children), each node with its own q, and later siblings only dropped, so the exact rule
    stays exact over it (a node's verdict depends only on its ancestors and earlier siblings).
    Verdict node indices are the same in both trees. This is how speculation turns down under
    load: on a compute-bound device, B sessions' trees cost B x T rows per pass while a plain
    step costs B."""
    if len(round_.tokens) <= nodes:
        return round_
    return RoundInput(round_.tokens[:nodes], round_.parents[:nodes], round_.q_token_ids[:nodes], round_.q_probs[:nodes])


def cached_entries(session: Session) -> int:
    """Entries in a session's cache (0 once it has ended and freed its cache)."""
    return session.cached_tokens() if session.cache is not None else 0


def new_tokens(session: Session, round_: RoundInput) -> int:
    """Tokens a round adds to its pass: the pending ones (not yet cached) and its nodes (0 for a
    session that ended while its round waited: prepare() refuses that round)."""
    return 0 if session.closed else pending_tokens(session) + len(round_.tokens)


def pending_tokens(session: Session) -> int:
    """A session's pending tokens: committed, not yet cached (0 for a session that has ended)."""
    return 0 if session.closed else len(session.tokens) - session.cached_tokens()
