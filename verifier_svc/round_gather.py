"""How long a pass waits for the sessions whose drafters are turning around.

When a pass ends, its sessions get their verdicts and each drafter turns around: it reads the
verdict, drafts, and sends the next round, a few milliseconds later. Rounds of other sessions
are usually waiting already (they arrived during the pass). A pass that starts at once with
those leaves the returning sessions out, and they arrive during it: the sessions split into two
cohorts that take turns, each pass with half the rows for the same fixed cost, and the split
persists because each cohort's rounds arrive while the other's pass runs. Measured on this
project's 2-core CPU at 16 sessions: 8 rounds per pass instead of 10, 12% fewer tokens/s.

So a pass also waits for the open sessions that have their verdict and have not sent their
next round, each until its verdict's time plus its turnaround (seconds from a verdict to that
session's next round: a running mean per session, the verifier-wide mean before its first) with
half again for jitter, and only for sessions whose turnaround is below `limit`. The scheduler
uses the fixed seconds every pass pays (pass_time.py) as the limit: a round that takes longer
than that to come back is cheaper to leave for a pass of its own than to wait for.

Pure: no threads, no I/O; the scheduler holds the lock.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Generic, TypeVar

Key = TypeVar("Key")

PRIOR_TURNAROUND = 0.003  # seconds: a drafter on loopback, before any turnaround was seen
JITTER = 1.5  # a turnaround may run this much over its mean and still be waited for
DECAY = 0.7  # weight of the previous mean: a session's drafter can change pace (a model drafter's depth)


class Turnarounds(Generic[Key]):
    """Running mean of each session's turnaround, and of all sessions' (a new one's prior)."""

    def __init__(self, prior: float = PRIOR_TURNAROUND, decay: float = DECAY) -> None:
        self.decay = decay
        self.overall = prior
        self._by_session: weakref.WeakKeyDictionary[Key, float] = weakref.WeakKeyDictionary()

    def observe(self, session: Key, seconds: float) -> None:
        """One turnaround of `session`: seconds from its verdict to its next round (>= 0)."""
        seconds = max(0.0, seconds)
        previous = self._by_session.get(session)
        self._by_session[session] = seconds if previous is None else self.decay * previous + (1 - self.decay) * seconds
        self.overall = self.decay * self.overall + (1 - self.decay) * seconds

    def expected(self, session: Key) -> float:
        return self._by_session.get(session, self.overall)


def cohort_deadline(out: Iterable[tuple[float, float]], limit: float, slack: float) -> float | None:
    """Until when the next pass waits for the sessions that are out, given as (time of their
    verdict, expected turnaround): the latest verdict time + JITTER x turnaround + `slack` among
    those whose turnaround is below `limit`, each never past its verdict time + limit. None: no
    session worth waiting for."""
    due = [at + min(limit, JITTER * turnaround + slack) for at, turnaround in out if turnaround < limit]
    return max(due, default=None)
