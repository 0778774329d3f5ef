"""A generation's verifier session that survives a broken stream: it is re-opened, on the same or
another verifier, with the prompt plus every token committed so far, and the round in flight is
sent again. The round loop (generation.py) sees one uninterrupted stream.

Contract:
- `ResumingVerifier(pool, policy, deadline)` places the session on a ready verifier of the pool
  at once (UNAVAILABLE / FAILED_PRECONDITION from the pool as before, nothing retried yet).
  `Verify()` returns a call with the surface of a grpc.aio stream call that the round loop uses
  (write, read, done_writing, cancel).
- The call keeps the committed tokens itself: per verdict, the accepted path's tokens of the
  round it answers, then the recovered or bonus token.
- A break is any of: the stream ends with UNAVAILABLE, CANCELLED (by the server: our own
  cancellation is asyncio's CancelledError and never retried), UNKNOWN or INTERNAL (transport
  failures surface as these), or it ends without the verdict of the round in flight. Then the
  verifier is reported to the pool (not ready until its next load poll answers), and a session is
  opened on a ready verifier, another one where there is one, with prompt + committed tokens,
  the same sampling and acceptance rule and the seed `resume_seed(seed, committed)`, and the
  round in flight is sent again. A RESOURCE_EXHAUSTED answer to such a re-open, or no ready
  verifier, counts as one more failed attempt.
- Bounded: at most `policy.attempts` re-opens per break (the count restarts after each verdict),
  the first at once, each later one after a wait doubling from `backoff_seconds` up to
  `max_backoff_seconds`; then UNAVAILABLE naming the cause. Every verifier call carries the
  client's deadline; DEADLINE_EXCEEDED and every other status pass through untouched.

Why the output is unaffected: a verdict depends only on the committed tokens, the round and the
session's random generator. At temperature 0 there is no randomness, so the resumed run emits
exactly the tokens of an uninterrupted one. At temperature > 0 the re-opened session samples
from the target given the committed prefix, so the continuation is still distributed exactly as
the target's (no token was emitted twice or skipped: the round in flight had produced nothing);
its generator is seeded with `resume_seed`, so a seeded request that breaks at the same point
twice gives the same output both times.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass

import grpc

from drafter_svc.verifier_pool import Placement, VerifierPool
from specdec.errors import SpecdecError, Unavailable
from specdec.v1 import verifier_pb2

log = logging.getLogger(__name__)

# Statuses that mean the stream, not the request, failed.
BROKEN_STREAM_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
)


@dataclass(frozen=True)
class ResumePolicy:
    attempts: int = 8  # re-opens per break; 0: a broken stream fails the generation (UNAVAILABLE)
    backoff_seconds: float = 0.25  # the wait before the second attempt; doubles after each
    max_backoff_seconds: float = 4.0


def resume_seed(seed: int | None, generated: int) -> int:
    """The seed of a session re-opened after `generated` tokens: the first 63 bits of
    sha256("specdec-resume:{seed}:{generated}"); random when the request set no seed."""
    if seed is None:
        return int.from_bytes(os.urandom(8), "little") >> 1
    digest = hashlib.sha256(f"specdec-resume:{seed}:{generated}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class ResumingVerifier:
    """The verifier side of one generation: where its session runs now, and how often it moved."""

    def __init__(self, pool: VerifierPool, policy: ResumePolicy = ResumePolicy(), deadline: float | None = None) -> None:
        """deadline: time.monotonic() by which the client wants its answer (None: none)."""
        self.pool = pool
        self.policy = policy
        self.deadline = deadline
        self.resumes = 0
        self._placed: AbstractContextManager[Placement] | None = None
        self.placement = self.place()

    def place(self, avoid: str | None = None) -> Placement:
        """Move to a ready verifier (another than `avoid` where there is one)."""
        placed = self.pool.place(avoid=avoid)
        placement = placed.__enter__()
        self.close()
        self._placed, self.placement = placed, placement
        return placement

    def timeout(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def Verify(self) -> ResumingCall:  # noqa: N802 - the stub's method name
        return ResumingCall(self)

    def close(self) -> None:
        if self._placed is not None:
            self._placed.__exit__(None, None, None)
            self._placed = None

    def __enter__(self) -> ResumingVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ResumingCall:
    """One Verify stream as the round loop sees it, re-opened underneath when it breaks."""

    def __init__(self, verifier: ResumingVerifier) -> None:
        self.verifier = verifier
        self.call = verifier.placement.stub.Verify(timeout=verifier.timeout())
        self.open: verifier_pb2.OpenSession | None = None
        self.committed: list[int] = []  # tokens generated so far (after the prompt)
        self.in_flight: verifier_pb2.VerifyRequest | None = None  # the round awaiting its verdict
        self.failures = 0  # failed attempts since the last verdict
        # The session on the stream now was opened asking for the prompt's keys and values, and
        # they have not come yet (a re-opened session never asks: resumable_session.reopen_message).
        self.prompt_cache_due = False

    async def write(self, message: verifier_pb2.VerifyRequest) -> None:
        kind = message.WhichOneof("kind")
        if kind == "open":
            self.open = message.open
            self.prompt_cache_due = message.open.return_prompt_cache
        elif kind == "round":
            self.in_flight = message
        await self._send(message)

    async def read(self) -> verifier_pb2.VerifyResponse:
        """The verdict of the round in flight, from whichever session is alive; with no round in
        flight, the prompt's keys and values that follow the first verdict (empty when the stream
        broke before them, or the session was re-opened before its first verdict: a re-opened
        session does not send them)."""
        while True:
            if self.in_flight is None and not self.prompt_cache_due:
                return verifier_pb2.VerifyResponse(prompt_cache=verifier_pb2.PromptCache())
            try:
                verdict = await self.call.read()
                if verdict is grpc.aio.EOF:
                    cause = "the verifier ended the session unexpectedly"
                elif verdict.HasField("prompt_cache"):  # not a verdict: the message after the first one
                    self.prompt_cache_due = False
                    return verdict
                else:
                    self._commit(verdict)
                    return verdict
            except grpc.aio.AioRpcError as error:
                # a re-opened session refused for load counts as one failed attempt
                refused = error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and self.failures > 0
                if (error.code() not in BROKEN_STREAM_CODES and not refused) or self.open is None:
                    raise
                cause = f"{error.code().name}: {error.details()}"
            await self._resume(cause)

    async def done_writing(self) -> None:
        try:
            await self.call.done_writing()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the generation is complete; a session that broke now has nothing left to give

    def cancel(self) -> bool:
        return self.call.cancel()

    async def _send(self, message: verifier_pb2.VerifyRequest) -> None:
        """Write; a stream that broke shows it on the next read, which resumes it."""
        try:
            await self.call.write(message)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
            log.debug("write to verifier %s failed: %s", self.verifier.placement.address, type(error).__name__)

    def _commit(self, verdict: verifier_pb2.VerifyResponse) -> None:
        nodes = self.in_flight.round.nodes if self.in_flight is not None else []
        self.committed += [nodes[i].token_id for i in verdict.accepted_nodes if 0 <= i < len(nodes)]
        self.committed.append(verdict.next_token_id)
        self.in_flight = None
        self.failures = 0

    def reopen_message(self) -> verifier_pb2.VerifyRequest:
        """The re-opened session: prompt + committed tokens, same sampling and rule, derived seed."""
        assert self.open is not None  # only an opened session is resumed
        opening = verifier_pb2.OpenSession()
        opening.CopyFrom(self.open)
        del opening.prompt_token_ids[:]
        opening.prompt_token_ids.extend([*self.open.prompt_token_ids, *self.committed])
        opening.generated_tokens = self.open.generated_tokens + len(self.committed)  # the constraint and penalties see them as output
        opening.return_prompt_cache = False  # the drafter has read or been sent the prompt: it reads the rest itself
        seed = self.open.sampling.seed if self.open.sampling.HasField("seed") else None
        opening.sampling.seed = resume_seed(seed, len(self.committed))
        return verifier_pb2.VerifyRequest(open=opening)

    async def _resume(self, cause: str) -> None:
        verifier, policy = self.verifier, self.verifier.policy
        broken = verifier.placement.address
        self.call.cancel()
        verifier.pool.report_broken(broken)  # once per break: a later attempt may find it back
        log.info("verifier %s: session broke (%s); resuming after %d tokens", broken, cause.split(":")[0], len(self.committed))
        while True:
            self.failures += 1
            if self.failures > policy.attempts:
                raise Unavailable(
                    "", f"the verifier session broke ({cause}) and was not resumed in {policy.attempts} attempts"
                )
            if self.failures > 1:
                wait = min(policy.backoff_seconds * 2 ** (self.failures - 2), policy.max_backoff_seconds)
                timeout = verifier.timeout()
                await asyncio.sleep(wait if timeout is None else min(wait, timeout))
            try:
                placement = verifier.place(avoid=broken)
            except SpecdecError as error:  # no ready verifier (yet): wait and try again
                log.debug("resume attempt %d: %s", self.failures, error)
                continue
            self.call = placement.stub.Verify(timeout=verifier.timeout())
            verifier.resumes += 1
            self.prompt_cache_due = False
            await self._send(self.reopen_message())
            if self.in_flight is not None:
                await self._send(self.in_flight)
            return
