"""The scheduler with stand-in sessions (no model): a lone session's round runs at once; with
several sessions open, rounds that arrive within the wait share one pass; the token budget splits
passes; an invalid round fails only its own stream."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from specdec.errors import FailedPrecondition, InvalidArgument, Unavailable
from verifier_svc import scheduler as scheduler_module
from verifier_svc.scheduler import PassRecord, Scheduler
from verifier_svc.session import RoundInput


class FakeTree(list):
    pass


class FakePrepared:
    def __init__(self, round_: RoundInput) -> None:
        self.round = round_
        self.pending = [0]
        self.tree = FakeTree(round_.tokens)
        self.ahead = None

    def cut(self, prefix: RoundInput) -> FakePrepared:
        return FakePrepared(prefix)


class FakeTarget:
    def score(self, cache, pending, tree, argmax_only):  # type: ignore[no-untyped-def]
        return ("alone", list(tree))


class FakeSession:
    def __init__(self) -> None:
        self.tokens = [1, 2]
        self.cache: list[int] | None = [1]
        self.target = FakeTarget()
        self.closed = False
        self.argmax_only = False

    def cached_tokens(self) -> int:
        return len(self.cache or [])

    def prepare(self, round_: RoundInput) -> FakePrepared:
        if self.closed:
            raise FailedPrecondition("round", "the session has ended")
        if -5 in round_.tokens:
            raise InvalidArgument("round.nodes.token_id", "bad")
        return FakePrepared(round_)

    def finish(self, prepared: FakePrepared, logits):  # type: ignore[no-untyped-def]
        return logits


@pytest.fixture(autouse=True)
def fake_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "score_batch", lambda target, inputs: [("batched", list(x.tree)) for x in inputs])


def run(open_sessions: int, rounds: list[list[int]], max_wait_s: float, max_batch_tokens: int = 512,
        max_pass_rows: int = 0) -> tuple[list, list[PassRecord], float]:
    passes: list[PassRecord] = []
    s = Scheduler(lambda: open_sessions, max_batch_tokens, max_wait_s, max_pass_rows, on_pass=passes.append)
    s.start()

    async def go() -> list:
        return await asyncio.gather(*(s.verify(FakeSession(), RoundInput.point_masses(r)) for r in rounds), return_exceptions=True)  # type: ignore[arg-type]

    started = time.perf_counter()
    try:
        results = asyncio.run(go())
    finally:
        s.stop()
    elapsed = time.perf_counter() - started
    assert s._worker is not None
    s._worker.join(5)  # the worker may still be finishing its last pass after the verdicts went out
    return results, passes, elapsed


def test_a_lone_session_does_not_wait() -> None:
    results, passes, seconds = run(1, [[5, 6]], max_wait_s=2.0)
    assert results == [("alone", [5, 6])] and [p.rounds for p in passes] == [1]
    assert seconds < 1.0  # far below the 2 s wait


def test_rounds_of_open_sessions_share_a_pass_and_results_route_back() -> None:
    results, passes, _ = run(3, [[1], [2, 3], [4, 5, 6]], max_wait_s=2.0)
    assert results == [("batched", [1]), ("batched", [2, 3]), ("batched", [4, 5, 6])]
    assert [p.rounds for p in passes] == [3] and passes[0].tokens == (1 + 1) + (1 + 2) + (1 + 3)  # pending + nodes


def test_a_missing_session_costs_at_most_the_wait() -> None:
    results, passes, seconds = run(2, [[7]], max_wait_s=0.2)
    assert results == [("alone", [7])] and 0.2 <= seconds < 1.5


def test_sessions_turning_around_are_waited_for_so_they_do_not_take_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passes take 30 ms and each drafter turns around in 10 ms; session B starts 15 ms after A.
    Waiting only 3 ms from the first round's arrival, A and B would take turns for good, one
    round per pass (each arrives while the other's pass runs). Waiting for a session whose
    verdict went out, for its learned turnaround, brings them into one pass after a few rounds."""
    pass_seconds, turnaround, rounds = 0.030, 0.010, 8

    def slow_batch(target, inputs):  # type: ignore[no-untyped-def]
        time.sleep(pass_seconds)
        return [("batched", list(x.tree)) for x in inputs]

    monkeypatch.setattr(scheduler_module, "score_batch", slow_batch)
    monkeypatch.setattr(FakeTarget, "score", lambda self, cache, pending, tree, argmax_only: time.sleep(pass_seconds) or ("alone", list(tree)))
    passes: list[PassRecord] = []
    s = Scheduler(lambda: 2, 512, 0.003, on_pass=passes.append)
    s.pass_price.seed([pass_seconds, pass_seconds], 1)  # what the verifier timed at start: the fixed cost waited up to
    s.start()

    async def drive(start: float) -> None:
        await asyncio.sleep(start)
        session = FakeSession()
        for _ in range(rounds):
            await s.verify(session, RoundInput.point_masses([1]))  # type: ignore[arg-type]
            await asyncio.sleep(turnaround)

    async def go() -> None:
        await asyncio.gather(drive(0.0), drive(0.015))

    try:
        asyncio.run(go())
    finally:
        s.stop()
    assert s._worker is not None
    s._worker.join(5)
    shapes = [p.rounds for p in passes]
    # Together at the end; after an odd number of passes of one at the start, the session that
    # had one more of them finishes first and the other's last round is alone (the 2 x rounds
    # rounds then end in a pass of one).
    together = shapes[:-1] if shapes[-1] == 1 else shapes
    assert together[-3:] == [2, 2, 2], shapes
    assert len(passes) <= 2 * rounds - 4, shapes  # taking turns would be 16 passes of one


def test_token_budget_splits_passes_and_an_invalid_round_fails_alone() -> None:
    results, passes, _ = run(3, [[1, 2, 3], [-5], [4, 5, 6]], max_wait_s=2.0, max_batch_tokens=5)
    assert isinstance(results[1], InvalidArgument)
    assert results[0] == ("alone", [1, 2, 3]) and results[2] == ("alone", [4, 5, 6])
    assert sorted(p.rounds for p in passes) == [1, 1]


@pytest.mark.parametrize("budget", [512, 100])
def test_a_prompts_prefill_shares_the_pass_within_the_row_budget(budget: int) -> None:
    """A packed pass pads nothing: the 200-token prefill joins the decode rounds when the pass's
    rows stay within max_batch_tokens, else it runs in a pass of its own."""
    passes: list[PassRecord] = []
    s = Scheduler(lambda: 3, budget, 2.0, on_pass=passes.append)
    s.start()
    prompt = FakeSession()
    prompt.tokens, prompt.cache = list(range(200)), []  # 200 tokens to prefill

    async def go() -> list:
        rounds = [s.verify(x, RoundInput.point_masses([7])) for x in (FakeSession(), prompt, FakeSession())]  # type: ignore[arg-type]
        return await asyncio.gather(*rounds)

    try:
        results = asyncio.run(go())
    finally:
        s.stop()
    assert s._worker is not None
    s._worker.join(5)
    if budget == 512:
        assert results == [("batched", [7])] * 3
        assert [p.rounds for p in passes] == [3]
    else:
        assert results == [("batched", [7]), ("alone", [7]), ("batched", [7])]
        assert [p.rounds for p in passes] == [2, 1]


def test_under_load_trees_are_cut_to_the_row_budget_and_a_lone_round_is_not() -> None:
    passes: list[PassRecord] = []
    s = Scheduler(lambda: 2, 512, 2.0, max_pass_rows=8, on_pass=passes.append)
    s.start()

    async def go() -> list:
        both = [s.verify(FakeSession(), RoundInput.point_masses(list(range(1, 7)))) for _ in range(2)]  # type: ignore[arg-type]
        together = await asyncio.gather(*both)
        alone = await s.verify(FakeSession(), RoundInput.point_masses(list(range(1, 7))))  # type: ignore[arg-type]
        return [*together, alone]

    try:
        results = asyncio.run(go())
    finally:
        s.stop()
    assert results[:2] == [("batched", [1, 2, 3])] * 2  # 8 rows // 2 rounds - 1 pending = 3 nodes
    assert results[2] == ("alone", [1, 2, 3, 4, 5, 6])


def test_prune_keeps_a_prefix_of_nodes_with_their_q() -> None:
    round_ = RoundInput([5, 6, 7], [-1, 0, -1], [[5], [6, 1], [7]], [[1.0], [0.5, 0.5], [1.0]])
    assert scheduler_module.prune(round_, 2) == RoundInput([5, 6], [-1, 0], [[5], [6, 1]], [[1.0], [0.5, 0.5]])
    assert scheduler_module.prune(round_, 5) is round_


def test_a_round_whose_session_ended_while_it_waited_fails_alone_and_the_worker_lives_on() -> None:
    ended = FakeSession()
    ended.closed, ended.cache = True, None  # what closing a session leaves
    failing_hook_calls: list[PassRecord] = []

    def on_pass(record: PassRecord) -> None:  # a hook that breaks must not stop the worker either
        failing_hook_calls.append(record)
        raise RuntimeError("metrics backend down")

    s = Scheduler(lambda: 2, 512, 0.5, on_pass=on_pass)
    s.start()

    async def go() -> list:
        first = await asyncio.gather(
            s.verify(ended, RoundInput.point_masses([7])), s.verify(FakeSession(), RoundInput.point_masses([8])),  # type: ignore[arg-type]
            return_exceptions=True,
        )
        later = await asyncio.wait_for(s.verify(FakeSession(), RoundInput.point_masses([9])), timeout=5)  # type: ignore[arg-type]
        return [*first, later]

    try:
        refused, served, later = asyncio.run(go())
    finally:
        s.stop()
    assert isinstance(refused, FailedPrecondition) and refused.field == "round"
    assert served == ("alone", [8]) and later == ("alone", [9])
    assert failing_hook_calls  # the hook raised after the first pass, and `later` was still served


def test_calls_run_on_the_thread_that_runs_the_passes_and_their_errors_come_back() -> None:
    """A thread that runs tensor operations gets an OpenMP team of its own, and with more OpenMP
    threads than cores libgomp stops spinning, which slowed drafted passes by a fifth
    (scheduler.py): the model is loaded through `call`, on the thread that runs every pass."""
    threads: list[int] = []
    s = Scheduler(lambda: 1, 512, 0.0, before_pass=lambda session, prepared: threads.append(threading.get_ident()))
    s.start()

    async def go() -> tuple[int, list]:
        loader = await asyncio.wrap_future(s.call(threading.get_ident))  # where server.py loads the model
        verdicts = [await s.verify(FakeSession(), RoundInput.point_masses([t])) for t in (1, 2)]  # type: ignore[arg-type]
        with pytest.raises(ZeroDivisionError):
            await asyncio.wrap_future(s.call(lambda: 1 / 0))
        verdicts.append(await s.verify(FakeSession(), RoundInput.point_masses([3])))  # type: ignore[arg-type]
        return loader, verdicts

    try:
        loader, verdicts = asyncio.run(go())
    finally:
        s.stop()
    assert verdicts == [("alone", [1]), ("alone", [2]), ("alone", [3])]
    assert threads == [loader] * 3


def test_each_verdict_comes_with_its_pass_shape_and_the_pass_teaches_the_price() -> None:
    """Three rounds in one pass of 1 + 2 + 3 nodes and a pending token each: 9 packed rows;
    slots: the cached entries read."""
    s = Scheduler(lambda: 3, 512, 2.0)
    s.pass_price.seed([0.05, 0.06, 0.062], 100)
    seeded = s.price(100, 3)
    s.start()
    sessions = [FakeSession() for _ in range(3)]
    sessions[2].cache = [1, 2, 3, 4]

    async def go() -> list:
        return await asyncio.gather(*(
            s.verify_round(session, RoundInput.point_masses(r))  # type: ignore[arg-type]
            for session, r in zip(sessions, [[1], [2, 3], [4, 5, 6]])
        ))

    try:
        results = asyncio.run(go())
    finally:
        assert s.close(5.0)  # the pass is priced after its verdicts go out: wait for the worker
    records = {id(record) for _, record in results}
    assert len(records) == 1  # one pass, one record for all three
    record = results[0][1]
    assert (record.rounds, record.rows, record.slots) == (3, 2 + 3 + 4, 1 + 1 + 4)
    assert s.pass_price.passes == 1 and s.pass_price.shared_rounds == 3
    assert s.price(100, 3) != seeded and s.price(100, 3).known


def test_drafts_are_never_cut_by_cost_only_by_the_hard_row_limit() -> None:
    """The drafters price their nodes (the verifier publishes the price): a pass of several
    rounds keeps every node unless --max-pass-rows cuts it; a lone round keeps them all."""
    rounds = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    kept, _, _ = run(3, rounds, max_wait_s=2.0)
    assert kept == [("batched", r) for r in rounds]
    limited, _, _ = run(3, rounds, max_wait_s=2.0, max_pass_rows=9)  # 9 // 3 - 1 pending = 2 nodes each
    assert limited == [("batched", r[:2]) for r in rounds]
    alone, _, _ = run(1, [rounds[2]], max_wait_s=2.0, max_pass_rows=2)
    assert alone == [("alone", rounds[2])]


def test_a_bad_node_is_refused_even_where_the_limit_would_drop_it() -> None:
    rounds = [[1, 2, 3], [4, -5], [6, 7]]  # -5: a node the session refuses
    results, _, _ = run(3, rounds, max_wait_s=2.0, max_pass_rows=3)  # every node cut
    assert isinstance(results[1], InvalidArgument)
    assert results[0] == results[2] == ("batched", [])


def test_close_waits_for_the_running_pass_and_refuses_the_rounds_still_waiting() -> None:
    """On shutdown the worker leaves torch before the process ends (Scheduler.close): the pass
    it is running finishes, rounds queued behind it fail with Unavailable, later ones too."""
    in_pass, release = threading.Event(), threading.Event()

    def slow_pass(session, prepared) -> None:  # type: ignore[no-untyped-def]
        in_pass.set()
        release.wait(5)

    s = Scheduler(lambda: 1, 512, 0.0, before_pass=slow_pass)
    s.start()

    async def go() -> tuple[object, list, bool]:
        running = asyncio.ensure_future(s.verify(FakeSession(), RoundInput.point_masses([1])))  # type: ignore[arg-type]
        await asyncio.to_thread(in_pass.wait, 5)
        queued = [asyncio.ensure_future(s.verify(FakeSession(), RoundInput.point_masses([t]))) for t in (2, 3)]  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        closing = asyncio.ensure_future(asyncio.to_thread(s.close, 5.0))
        await asyncio.sleep(0.2)
        assert not closing.done()  # the pass is still running
        release.set()
        ended = await closing
        refused = await asyncio.gather(*queued, return_exceptions=True)
        with pytest.raises(Unavailable):
            await s.verify(FakeSession(), RoundInput.point_masses([4]))  # type: ignore[arg-type]
        return await running, refused, ended

    served, refused, ended = asyncio.run(go())
    assert served == ("alone", [1]) and ended
    assert all(isinstance(r, Unavailable) for r in refused)
    assert s._worker is not None and not s._worker.is_alive()
    with pytest.raises(Unavailable):
        s.call(lambda: 1).result(1)


def test_close_gives_up_after_its_timeout_on_a_call_that_runs_on() -> None:
    release = threading.Event()
    s = Scheduler(lambda: 1, 512, 0.0)
    s.start()
    loading = s.call(lambda: release.wait(5))  # a model load, say
    waiting = s.call(lambda: 1)
    time.sleep(0.1)
    started = time.perf_counter()
    assert not s.close(0.2)
    assert 0.2 <= time.perf_counter() - started < 2
    with pytest.raises(Unavailable):
        waiting.result(1)
    release.set()
    assert loading.result(5) is True
    assert s.close(5)
