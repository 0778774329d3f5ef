"""The verifier's batch planner: how long a pass waits, which waiting rounds share it, how many
nodes each keeps, and what size a lone pass is padded to. `BatchPlanner` is the scheduler's one
entry point; the rules are pure functions. docs/concepts/batching-and-load.md and
docs/design/pass-sizes.md hold the measurements behind them.

- **Waiting for sessions turning around** (`cohort_deadline`). When a pass ends its sessions'
  drafters read the verdict and send the next round a few milliseconds later. A pass that starts
  with only the rounds already waiting leaves them out; the sessions split into two cohorts that
  take turns, each pass with half the rows for the same fixed cost (16 sessions on the 2-core
  CPU: 8 rounds a pass instead of 10, 12% fewer tokens/s). So a pass also waits for each session
  that has its verdict and has not sent its next round, until its verdict time plus JITTER times
  its mean turnaround, but only for sessions turning around faster than the fixed seconds every
  pass pays: a slower one is cheaper left for a pass of its own.
- **Which rounds share a pass** (`pack`). A batched pass packs its rounds' rows one after another
  (batched_pass.py), so a round costs the pass only its own rows: a prompt's prefill beside
  decode rounds pads none of them. Rounds join in arrival order while the pass's rows stay
  within max_batch_tokens (the first always runs). Drafted nodes count as rows; the drafters
  price them (specdec/round_price.py).
- **Nodes kept** (`kept_nodes`). Hard limits only: with max_pass_rows set, each round of a
  B-round pass keeps at most max_pass_rows // B - pending of its nodes (a prefix of a token tree
  is a token tree: round_pass.prune). The verifier does not re-price drafts.
- **Pass sizes** (`fastest_at_least`). A CPU's BLAS is not monotonic in the rows of a product (a
  5-token pass can beat a 4-token one), so a lone pass of r real tokens may run padded to the
  fastest timed size s >= r; padding no real token attends to changes no logit.

Pure: no threads, no model; the scheduler holds its lock around BatchPlanner's state.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:  # the CPU backend's tuning imports fastest_at_least; sessions import backends
    from verifier_svc.session import RoundInput, Session

Key = TypeVar("Key")

PRIOR_TURNAROUND = 0.003  # seconds: a drafter on loopback, before any turnaround was seen
JITTER = 1.5  # a turnaround may run this much over its mean and still be waited for
DECAY = 0.7  # weight of the previous mean: a session's drafter can change pace
MIN_GAIN = 0.03  # a padded size must be this much faster than the real one (timing noise)


def pack(new_tokens: Sequence[int], max_tokens: int) -> list[int]:
    """Indices (in order) of the waiting rounds that share the next pass, given each one's new
    tokens (pending + drafted nodes), in arrival order: always the first; then each later one
    whose rows keep the pass's sum within max_tokens."""
    taken, rows = [], 0
    for index, n in enumerate(new_tokens):
        if not taken or rows + n <= max_tokens:
            taken.append(index)
            rows += n
    return taken


def kept_nodes(nodes: Sequence[int], pending: Sequence[int], max_pass_rows: int) -> list[int]:
    """How many of its `nodes` each round of a pass keeps: all of them in a lone pass or with
    max_pass_rows 0; else at most max_pass_rows // rounds - its pending tokens."""
    if len(nodes) < 2 or not max_pass_rows:
        return list(nodes)
    return [min(n, max(0, max_pass_rows // len(nodes) - p)) for n, p in zip(nodes, pending)]


def fastest_at_least(seconds: Sequence[float], min_gain: float = MIN_GAIN) -> list[int]:
    """seconds[i]: a lone pass of i + 1 tokens. sizes[i] = the size s >= i + 1 (at most
    len(seconds)) whose pass is fastest, taken only when it beats i + 1 tokens by more than
    min_gain; sizes[0] = 1 (plain decoding is never padded)."""
    sizes: list[int] = []
    for i in range(len(seconds)):
        best = min(range(i, len(seconds)), key=lambda j: (seconds[j], j))
        sizes.append(best + 1 if i > 0 and seconds[best] < (1 - min_gain) * seconds[i] else i + 1)
    return sizes


class Turnarounds(Generic[Key]):
    """Running mean of each session's turnaround (verdict to next round), and of all sessions'
    (a new session's prior)."""

    def __init__(self, prior: float = PRIOR_TURNAROUND, decay: float = DECAY) -> None:
        self.decay = decay
        self.overall = prior
        self._by_session: weakref.WeakKeyDictionary[Key, float] = weakref.WeakKeyDictionary()

    def observe(self, session: Key, seconds: float) -> None:
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


def pending_tokens(session: Session) -> int:
    """A session's pending tokens: committed, not yet cached (0 for a session that has ended)."""
    return 0 if session.closed else len(session.tokens) - session.cached_tokens()


class BatchPlanner:
    """The scheduler's planning state: turnarounds and the sessions out with their verdicts."""

    def __init__(self, max_batch_tokens: int = 512, max_wait_s: float = 0.003, max_pass_rows: int = 0) -> None:
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_s
        self.max_pass_rows = max_pass_rows
        self.turnarounds: Turnarounds[Session] = Turnarounds()
        self._verdict_at: weakref.WeakKeyDictionary[Session, float] = weakref.WeakKeyDictionary()

    def arrived(self, session: Session, now: float) -> None:
        """A round of `session` arrived at `now`: its turnaround ends."""
        verdict_at = self._verdict_at.pop(session, None)
        if verdict_at is not None:
            self.turnarounds.observe(session, now - verdict_at)

    def answered(self, sessions: Iterable[Session], now: float) -> None:
        """Verdicts of `sessions` go out at `now`: their turnarounds start."""
        for session in sessions:
            self._verdict_at[session] = now

    def wait_until(self, first_arrived: float, fixed_seconds: float) -> float:
        """Until when the next pass may wait for more rounds: max_wait_s after the first waiting
        round's arrival, or longer for sessions turning around faster than `fixed_seconds`."""
        out = [(at, self.turnarounds.expected(s)) for s, at in self._verdict_at.items() if not s.closed]
        return max(first_arrived + self.max_wait_s, cohort_deadline(out, fixed_seconds, self.max_wait_s) or 0.0)

    def choose(self, waiting: Sequence[tuple[Session, RoundInput]]) -> list[int]:
        """Indices of the waiting rounds (in arrival order) that share the next pass (`pack`)."""
        return pack([pending_tokens(s) + (0 if s.closed else len(r.tokens)) for s, r in waiting], self.max_batch_tokens)

    def kept(self, rounds: Sequence[tuple[Session, RoundInput]]) -> list[int]:
        """Nodes each round of a pass keeps (`kept_nodes`)."""
        return kept_nodes([len(r.tokens) for _, r in rounds], [pending_tokens(s) for s, _ in rounds], self.max_pass_rows)
