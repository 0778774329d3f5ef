"""The drafter's verifiers: one channel each, checked before use, polled, sessions placed.

Contract:
- The pool follows a Discovery (drafter_svc.discovery): every address it lists gets one gRPC
  channel, shared by all sessions placed there. Its `GetModelInfo` is polled every
  `poll_seconds`: before it takes sessions it must answer and its tokenizer fingerprint must
  equal the drafter's; each answer also brings its open sessions and the price of a new
  session's first round (specdec/round_price.py). A verifier that stops answering is not ready
  until it answers again (and is checked again).
- `place()` puts a new session on the ready verifier with the lowest load: (open sessions it
  reported + sessions this drafter placed there since that report) / its session limit; ties
  are broken at random so that drafters do not all pick the same one. The session stays on
  that verifier for its whole life: a verifier that leaves the discovered set takes no new
  sessions, but its channel stays open until its last running session ends.
- `report_broken(address)`: a session's stream to it broke; it takes no sessions until its next
  poll answers (resumable_session.py re-opens the session elsewhere meanwhile). Channels
  reconnect within `max_reconnect_backoff_ms` (2 s) of a verifier's return.
- No ready verifier: UNAVAILABLE naming what is known; only verifiers whose tokenizer differs:
  FAILED_PRECONDITION with the mismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import grpc

from drafter_svc.discovery import Discovery
from drafter_svc.verifier_info import VerifierInfo
from specdec.errors import FailedPrecondition, Unavailable
from specdec.round_price import RoundPrice
from specdec.tokenizer import Tokenizer
from specdec.v1 import verifier_pb2, verifier_pb2_grpc

log = logging.getLogger(__name__)
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


@dataclass(frozen=True)
class Placement:
    """Where one session runs: the verifier's stub and what it serves."""

    address: str
    stub: verifier_pb2_grpc.VerifierStub
    model_info: verifier_pb2.ModelInfo
    verifier_info: VerifierInfo


class Member:
    """One verifier of the pool and what the drafter knows about it."""

    def __init__(self, address: str, channel: grpc.aio.Channel) -> None:
        self.address = address
        self.channel = channel
        self.stub = verifier_pb2_grpc.VerifierStub(channel)
        self.listed = True  # still in the discovered set
        self.answering = False  # the last GetModelInfo succeeded
        self.model_info: verifier_pb2.ModelInfo | None = None
        self.mismatch: str | None = None
        self.open_sessions = 0  # as last reported
        self.max_sessions = 0
        self.placed_since_report = 0
        self.running = 0  # this drafter's sessions on it now
        self.poller: asyncio.Task[None] | None = None
        self.down_logged = False  # "not answering" was logged for the current outage

    @property
    def ready(self) -> bool:
        return self.listed and self.answering and self.model_info is not None and self.mismatch is None

    @property
    def load(self) -> float:
        return (self.open_sessions + self.placed_since_report) / max(self.max_sessions, 1)

    def describe(self) -> str:
        if self.mismatch:
            return f"{self.address} (tokenizer differs)"
        if not self.answering:
            return f"{self.address} (not answering)"
        return f"{self.address} ({self.open_sessions + self.placed_since_report}/{self.max_sessions} sessions)"


class VerifierPool:
    def __init__(
        self,
        discovery: Discovery,
        tokenizer: Tokenizer,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, str | int]] = (),
        poll_seconds: float = 1.0,
    ) -> None:
        self.discovery = discovery
        self.tokenizer = tokenizer
        self.credentials = credentials
        self.options = list(options)
        self.poll_seconds = poll_seconds
        self.members: dict[str, Member] = {}
        self._some_ready = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Follow the discovery in the background (call from the serving event loop)."""
        if self._follower is None:
            self._follower = asyncio.ensure_future(self._follow())
            self._follower.add_done_callback(self._followed)

    def _followed(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("following %r failed: no more verifier changes will be seen", self.discovery, exc_info=task.exception())

    async def wait_ready(self) -> None:
        """Until some verifier is ready (the drafter turns SERVING then)."""
        await self._some_ready.wait()

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
        for member in list(self.members.values()):
            await self._drop(member)

    @contextlib.contextmanager
    def place(self, avoid: str | None = None) -> Iterator[Placement]:
        """Choose the verifier for a new session (another than `avoid` where another is ready);
        the session runs inside the `with` block."""
        member = self._choose(avoid)
        info = member.model_info
        assert info is not None  # ready members have one
        member.running += 1
        member.placed_since_report += 1
        try:
            yield Placement(
                member.address, member.stub, info,
                VerifierInfo(
                    frozenset(info.eos_token_ids), info.context_length, RoundPrice.from_proto(info.price), info.open_sessions,
                    info.sends_prompt_cache,
                ),
            )
        finally:
            member.running -= 1
            if not member.listed and member.running == 0 and self.members.get(member.address) is member:
                asyncio.ensure_future(self._drop(member))

    def report_broken(self, address: str) -> None:
        """A session's stream to `address` broke: not ready until its next poll answers."""
        member = self.members.get(address)
        if member is not None and member.answering:
            log.info("verifier %s: a session stream broke; not ready until it answers again", address)
            member.answering = False
            member.model_info = None  # checked again (a restarted verifier may serve another model)

    def _choose(self, avoid: str | None = None) -> Member:
        ready = [m for m in self.members.values() if m.ready]
        ready = [m for m in ready if m.address != avoid] or ready
        if ready:
            return min(ready, key=lambda m: (m.load, random.random()))
        listed = [m for m in self.members.values() if m.listed]
        if listed and all(m.mismatch for m in listed):
            raise FailedPrecondition("", listed[0].mismatch or "")
        known = ", ".join(m.describe() for m in sorted(listed, key=lambda m: m.address)) or "none found"
        raise Unavailable("", f"no verifier is ready (verifiers from {self.discovery!r}: {known})")

    async def _follow(self) -> None:
        async for addresses in self.discovery.updates():
            for address in sorted(addresses):
                member = self.members.get(address)
                if member is None:
                    member = self.members[address] = Member(address, self._channel(address))
                    log.info("verifier %s joined", address)
                elif not member.listed:
                    log.info("verifier %s is back", address)
                member.listed = True
                if member.poller is None:
                    member.poller = asyncio.ensure_future(self._poll(member))
            for member in list(self.members.values()):
                if member.listed and member.address not in addresses:
                    log.info("verifier %s left (%d running sessions stay on it)", member.address, member.running)
                    member.listed = False
                    if member.poller is not None:
                        member.poller.cancel()
                        member.poller = None
                    if member.running == 0:
                        await self._drop(member)

    def _channel(self, address: str) -> grpc.aio.Channel:
        # gRPC's reconnect backoff grows to 120 s; a restarted verifier should be seen in seconds
        options = [*RECONNECT_OPTIONS, *self.options]
        if self.credentials is not None:
            return grpc.aio.secure_channel(address, self.credentials, options=options)
        return grpc.aio.insecure_channel(address, options=options)

    async def _drop(self, member: Member) -> None:
        if self.members.get(member.address) is member:
            del self.members[member.address]
        if member.poller is not None:
            member.poller.cancel()
        await member.channel.close()

    async def _poll(self, member: Member) -> None:
        """Check the model once per (re)connection; every poll keeps the load and price current."""
        timeout = max(5.0, 2 * self.poll_seconds)
        while True:
            try:
                checked = member.model_info is not None
                info = await member.stub.GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=timeout)
                if not checked:
                    member.mismatch = self._mismatch(member.address, info)
                if not info.max_draft_depth:  # a verifier from before token trees: chains only
                    info.max_draft_depth = info.max_draft_tokens
                member.model_info = info
                member.open_sessions, member.max_sessions = info.open_sessions, info.max_sessions
                member.placed_since_report = 0
                was_answering, member.answering, member.down_logged = member.answering, True, False
                if not was_answering:
                    log.info("verifier %s answers: %s", member.address, member.describe())
                if member.ready:
                    self._some_ready.set()
            except grpc.aio.AioRpcError as error:
                if member.answering or not member.down_logged:  # once per outage, not every poll
                    log.info("verifier %s not answering: %s", member.address, error.code().name)
                    member.down_logged = True
                member.answering = False
                member.model_info = None  # check the model again once it answers
            await asyncio.sleep(self.poll_seconds)

    def _mismatch(self, address: str, info: verifier_pb2.ModelInfo) -> str | None:
        if info.tokenizer_fingerprint == self.tokenizer.fingerprint:
            return None
        message = (
            f"the verifier at {address} serves {info.model_name} whose tokenizer "
            f"(fingerprint {info.tokenizer_fingerprint[:12]}) differs from this drafter's "
            f"({self.tokenizer.fingerprint[:12]}); start the drafter with the verifier's model"
        )
        log.error("%s", message)
        return message
