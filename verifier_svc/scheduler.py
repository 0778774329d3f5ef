"""The verifier's round scheduler: rounds waiting from all open sessions go into one target pass.

Streams submit rounds from the event loop; one worker thread owns the target model: it loads
the model (`call`) and runs every pass, and no other thread runs a parallel tensor operation
(each would get an OpenMP team of its own, which slows passes: docs/design/one-model-thread.md).
It takes
the first waiting round and, only while other sessions are open and have not yet submitted,
waits for them, then takes the rounds that share the pass and the nodes each keeps, as the batch
planner says (batch_planner.py), and runs them as one pass (batched_pass.score_batch; a lone
round runs TargetModel.score, so a single session pays no extra latency). Rounds that arrive
while a pass runs wait for the next one. Each round's validation or acceptance error goes back
to its own stream only. Every decode pass teaches the pass-cost fit (pass_price.py), from which
`price` sets the price of a session's next round.

With `ahead_passes` on, once a verdict of a plain session (its drafter's hint: no speculation)
has been written (`sent`, from its stream) and nothing waits, the worker runs that session's next
one-token pass (Session.run_ahead), so the verdict's trip to the drafter and the next round's trip
back overlap the pass instead of preceding it; the next round, if empty, is answered from it
without a pass. Only with one session open: with others, a pass run ahead would delay their
rounds and leave the batched pass they could share (docs/design/ahead-passes.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from specdec.errors import Unavailable
from verifier_svc.acceptance import RoundVerdict
from verifier_svc.ahead_pass import AheadPasses
from verifier_svc.batched_pass import PassInput, score_batch
from specdec.round_price import RoundPrice
from verifier_svc.batch_planner import BatchPlanner
from verifier_svc.pass_price import DECODE_MAX_PENDING, PassPriceModel
from verifier_svc.round_pass import PassRecord, cached_entries, prune
from verifier_svc.session import PreparedRound, RoundInput, Session

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class _Waiting:
    session: Session
    round: RoundInput
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.perf_counter)


class Scheduler:
    def __init__(
        self,
        open_sessions: Callable[[], int],
        max_batch_tokens: int = 512,
        max_wait_s: float = 0.003,
        max_pass_rows: int = 0,
        on_pass: Callable[[PassRecord], None] | None = None,
        before_pass: Callable[[Session, PreparedRound], None] | None = None,
        ahead_passes: bool = True,
    ) -> None:
        """open_sessions: how many sessions could submit a round (the wait stops once that many
        rounds are waiting). before_pass: a check per prepared round (e.g. KV memory) that may
        raise to refuse that round alone. max_pass_rows (0: off): under load, each round of a
        B-round pass keeps at most max_pass_rows // B - pending of its nodes (batch_planner.py)."""
        self.open_sessions = open_sessions
        self.planner = BatchPlanner(max_batch_tokens, max_wait_s, max_pass_rows)
        self.on_pass = on_pass
        self.before_pass = before_pass
        self._queue: deque[_Waiting] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._worker: threading.Thread | None = None
        self._calls: deque[tuple[Callable[[], Any], Future[Any]]] = deque()  # for `call`
        self.pass_price = PassPriceModel()  # written by the worker thread only
        self.ahead = AheadPasses(ahead_passes)
        self._ahead: Session | None = None  # the lone session whose verdict was just sent (under _cond)

    def depth(self) -> int:
        """Rounds waiting for a pass."""
        return len(self._queue)

    def start(self) -> None:
        self._worker = threading.Thread(target=self._run, name="target-scheduler", daemon=True)
        self._worker.start()

    def call(self, fn: Callable[[], T]) -> Future[T]:
        """Run `fn` on the worker thread, between passes: whatever touches the model (loading it,
        warming it up) runs there (module docstring). Fails with Unavailable once stopped."""
        future: Future[T] = Future()
        with self._cond:
            if self._stopped:
                future.set_exception(_stopping())
            else:
                self._calls.append((fn, future))
                self._cond.notify()
        return future

    def stop(self) -> None:
        """Take no more work: rounds still waiting and calls not yet started fail with
        Unavailable; a pass or call already running finishes (see close)."""
        with self._cond:
            self._stopped = True
            waiting, calls = list(self._queue), list(self._calls)
            self._queue.clear()
            self._calls.clear()
            self._cond.notify()
        for w in waiting:
            _resolve(w, error=_stopping())
        for _, future in calls:
            if future.set_running_or_notify_cancel():
                future.set_exception(_stopping())

    def close(self, timeout: float) -> bool:
        """Stop (see stop) and wait up to `timeout` seconds for the worker to finish the pass or
        call it is running; True once the worker has ended.

        A process must not end while the worker is inside torch: interpreter teardown ends a
        daemon thread that wants the GIL back by unwinding its stack, and unwinding torch's C++
        frames aborts the process ("terminate called without an active exception", SIGABRT)."""
        self.stop()
        if self._worker is None:
            return True
        self._worker.join(timeout)
        return not self._worker.is_alive()

    async def verify(self, session: Session, round_: RoundInput) -> RoundVerdict:
        """Queue a round; resolves with its verdict once a pass has scored it."""
        verdict, _ = await self.verify_round(session, round_)
        return verdict

    async def verify_round(self, session: Session, round_: RoundInput) -> tuple[RoundVerdict, PassRecord]:
        """Queue a round; resolves with its verdict and the record of the pass that scored it.
        Unavailable once stopped."""
        loop = asyncio.get_running_loop()
        waiting = _Waiting(session, round_, loop.create_future(), loop)
        with self._cond:
            if self._stopped:
                raise _stopping()
            self.planner.arrived(session, waiting.arrived)
            self._queue.append(waiting)
            self._cond.notify()
        return await waiting.future

    def _take(self) -> list[_Waiting]:
        """Block for the first round, wait briefly for others, take up to the token budget."""
        with self._cond:
            while not self._queue and not self._calls and not self._stopped and self._ahead is None:
                self._cond.wait()
            if self._stopped or not self._queue:
                return []
            while len(self._queue) < self.open_sessions() and not self._stopped:
                left = self.planner.wait_until(self._queue[0].arrived, self.pass_price.fixed_seconds) - time.perf_counter()
                if left <= 0:
                    break
                self._cond.wait(left)
            # The others wait, in order, for the next pass.
            waiting = list(self._queue)
            chosen = set(self.planner.choose([(w.session, w.round) for w in waiting]))
            self._queue = deque(w for i, w in enumerate(waiting) if i not in chosen)
            return [w for i, w in enumerate(waiting) if i in chosen]

    def _next_call(self) -> tuple[Callable[[], Any], Future[Any]] | None:
        with self._cond:
            return self._calls.popleft() if self._calls and not self._stopped else None

    def _run(self) -> None:
        while not self._stopped:
            while (call := self._next_call()) is not None:
                fn, future = call
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as error:  # noqa: BLE001 - goes back to the caller
                        future.set_exception(error)
            self._run_ahead()
            batch = self._take()
            try:
                if batch:
                    self.run_pass(batch)
            except Exception as error:  # noqa: BLE001 - the worker must outlive any one pass
                log.exception("a target pass failed")
                for w in batch:
                    _resolve(w, error=error)

    def sent(self, session: Session) -> None:
        """The stream wrote a verdict of `session`: its next pass may run ahead (module docstring).
        Not earlier: the pass's Python would hold the GIL the event loop needs to send it."""
        with self._cond:
            if self.ahead.enabled and session.plain and not self._queue and self.open_sessions() == 1:
                self._ahead = session
                self._cond.notify()

    def _run_ahead(self) -> None:
        """The lone plain session's next pass, if nothing waits (module docstring)."""
        with self._cond:
            session, self._ahead = self._ahead, None
            if session is None or self._queue or self._calls or self._stopped or self.open_sessions() != 1:
                return
        record = self.ahead.run_for(session)
        if record is not None:
            self.pass_price.observe(record.rows, record.slots, record.seconds, 1)
            self._observe(record)

    def _observe(self, record: PassRecord) -> None:
        if self.on_pass:
            try:
                self.on_pass(record)
            except Exception:  # noqa: BLE001 - a broken hook (metrics) must not withhold the verdicts
                log.exception("the pass hook failed")

    def run_pass(self, batch: list[_Waiting]) -> None:
        """Prepare each round, score the valid ones in one pass, finish each; resolve futures."""
        started = time.perf_counter()
        ready: list[tuple[_Waiting, PreparedRound]] = []
        keep = self.planner.kept([(w.session, w.round) for w in batch])
        for w, nodes in zip(batch, keep):
            try:
                # The whole round is validated, then cut: a bad node is refused whatever the load.
                prepared = w.session.prepare(w.round)
                if nodes < len(w.round.tokens):
                    prepared = prepared.cut(prune(w.round, nodes))
                if self.before_pass:
                    self.before_pass(w.session, prepared)
                ready.append((w, prepared))
            except Exception as error:  # noqa: BLE001 - goes back to that round's stream
                _resolve(w, error=error)
        if not ready:
            return
        passing = [(w, p) for w, p in ready if p.ahead is None]  # the others were scored ahead
        self.ahead.used += len(ready) - len(passing)
        rows = sum(len(p.pending) + len(p.tree) for _, p in passing)  # packed: batched_pass.py
        slots = sum(cached_entries(w.session) for w, _ in passing)
        try:
            scored = iter(self._score(passing))
        except Exception as error:  # noqa: BLE001 - a failed pass fails its rounds, not the worker
            for w, _ in passing:
                _resolve(w, error=error)
            ready = [(w, p) for w, p in ready if p.ahead is not None]
            scored = iter(())
        results: list[tuple[_Waiting, RoundVerdict | None, BaseException | None]] = []
        for w, p in ready:
            logits = p.ahead if p.ahead is not None else next(scored)
            try:
                results.append((w, w.session.finish(p, logits), None))
            except Exception as error:  # noqa: BLE001
                results.append((w, None, error))
        seconds = time.perf_counter() - started
        record = PassRecord(len(ready), rows, [started - w.arrived for w, _ in ready], seconds, rows, slots)
        if passing:  # before the verdicts go out: a client that has its verdict sees the pass counted
            self._observe(record)
        # Before the verdicts go out, so that each verdict's price has its own pass in the fit.
        # After them it gained nothing: the refit (a least-squares solve) holds the GIL that the
        # event loop needs to send them, so they waited for it (docs/design/pass-cost.md).
        if passing and max(len(p.pending) for _, p in passing) <= DECODE_MAX_PENDING:
            self.pass_price.observe(rows, slots, seconds, len(passing))
        with self._cond:  # before the verdicts go out: their turnarounds start now
            self.planner.answered([w.session for w, _, error in results if error is None], time.perf_counter())
        for w, verdict, error in results:
            _resolve(w, result=None if error else (verdict, record), error=error)

    @staticmethod
    def _score(rounds: list[tuple[_Waiting, PreparedRound]]) -> list[torch.Tensor]:
        """Each round's logits from one pass (a lone round: TargetModel.score; none: no pass)."""
        if len(rounds) <= 1:
            return [w.session.target.score(w.session.cache, p.pending, p.tree, w.session.argmax_only) for w, p in rounds]
        return score_batch(rounds[0][0].session.target, [PassInput(w.session.cache, p.pending, p.tree) for w, p in rounds])

    def price(self, context: int, shared: int) -> RoundPrice:
        """The price of a session's next round after `context` cached tokens, with `shared`
        rounds likely in its pass (pass_price.py)."""
        return self.pass_price.price(context, shared)


def _stopping() -> Unavailable:
    return Unavailable("", "the verifier is shutting down")


def _resolve(w: _Waiting, result: tuple[RoundVerdict, PassRecord] | None = None, error: BaseException | None = None) -> None:
    def settle() -> None:
        if w.future.done():  # the stream went away (cancelled)
            return
        if error is not None:
            w.future.set_exception(error)
        else:
            w.future.set_result(result)

    try:
        w.loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the stream's event loop is gone (shutdown): nobody waits for this round
        pass
