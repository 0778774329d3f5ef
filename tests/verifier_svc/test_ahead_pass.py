"""Passes run ahead (scheduler.py, Session.run_ahead) against the real model: a lone plain
session's next one-token pass runs as soon as its verdict is out, and the session commits exactly
the tokens it commits without them, greedy or sampled; a round that drafts after all drops the
pass and its cache entry; without the plain hint, with two sessions open, or after a failed pass
run ahead, nothing changes but the head start."""

from __future__ import annotations

import asyncio

import pytest

from specdec.sampling_params import SamplingParams
from verifier_svc.acceptance import RoundVerdict
from verifier_svc.scheduler import Scheduler
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel

LIMITS = Limits(max_draft_tokens=32, max_draft_depth=16, context_length=2048)
PLAIN = RoundInput.point_masses([])


@pytest.fixture(scope="module")
def target(reference_model) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(reference_model, "reference")


@pytest.fixture(scope="module")
def prompt(tokenizer) -> list[int]:  # type: ignore[no-untyped-def]
    return tokenizer.encode("The lighthouse keeper climbed the stairs and")


# A drafter's turnaround between a verdict and its next round: through the services, its trip
# over gRPC; without it the next round would be queued before the worker looks (no pass to run
# ahead then: the round is already there). Ample, so that the counts below are exact.
TURNAROUND_S = 0.05


def drive(scheduler: Scheduler, session: Session, rounds: list[RoundInput]) -> list[RoundVerdict]:
    """The rounds one after another through the scheduler, each TURNAROUND_S after the last
    verdict was sent; returns once any pass run ahead after the last verdict has ended (a call
    runs on the worker between passes)."""

    async def go() -> list[RoundVerdict]:
        verdicts = []
        for r in rounds:
            verdicts.append(await scheduler.verify(session, r))
            scheduler.sent(session)  # as the servicer does once the verdict is written
            await asyncio.sleep(TURNAROUND_S)
        return verdicts

    verdicts = asyncio.run(go())
    scheduler.call(lambda: None).result(timeout=60)
    return verdicts


def decode(target: TargetModel, prompt: list[int], rounds: list[RoundInput], ahead: bool, open_sessions: int = 1,
           sampling: SamplingParams = SamplingParams(temperature=0.0), seed: int | None = None, plain: bool = True,
           ) -> tuple[Session, Scheduler, list[RoundVerdict]]:
    """A session (with the drafter's plain hint unless told) through a scheduler with passes run
    ahead or without."""
    scheduler = Scheduler(lambda: open_sessions, max_wait_s=0.001, ahead_passes=ahead)
    scheduler.start()
    session = Session(target, prompt, sampling, seed, LIMITS, plain=plain)
    try:
        verdicts = drive(scheduler, session, rounds)
    finally:
        scheduler.close(60)
    return session, scheduler, verdicts


@pytest.mark.parametrize("sampling, seed", [(SamplingParams(temperature=0.0), None), (SamplingParams(temperature=1.0), 11)], ids=["greedy", "sampled"])
def test_plain_rounds_scored_ahead_commit_the_same_tokens(target: TargetModel, prompt: list[int], sampling: SamplingParams, seed: int | None) -> None:
    rounds = [PLAIN] * 10
    plain, off, _ = decode(target, prompt, rounds, ahead=False, sampling=sampling, seed=seed)
    ahead, on, _ = decode(target, prompt, rounds, ahead=True, sampling=sampling, seed=seed)
    assert ahead.tokens == plain.tokens
    assert off.ahead.run == 0
    # Every round after the prompt's is answered from a pass run ahead; the one run after the
    # last verdict waits for a round that never comes.
    assert (on.ahead.run, on.ahead.used) == (len(rounds), len(rounds) - 1)
    assert ahead.ahead is not None and len(ahead.cache) == len(ahead.tokens)  # the last one's entry


def test_a_round_that_drafts_drops_the_pass_run_ahead(target: TargetModel, prompt: list[int]) -> None:
    """After plain rounds, a round with a drafted chain (the target's own greedy continuation,
    one token wrong) gets the verdict it gets without passes run ahead."""
    reference, _, _ = decode(target, prompt, [PLAIN] * 8, ahead=False)
    continuation = reference.tokens[len(prompt) + 4 :]
    drafted = RoundInput.point_masses([*continuation[:2], (continuation[2] + 1) % target.vocab_size])
    rounds = [PLAIN] * 4 + [drafted, PLAIN]
    plain, _, expected = decode(target, prompt, rounds, ahead=False)
    ahead, on, verdicts = decode(target, prompt, rounds, ahead=True)
    assert verdicts[4].accepted_nodes == expected[4].accepted_nodes == [0, 1]
    assert ahead.tokens == plain.tokens == reference.tokens[: len(prompt) + 8]
    # Run ahead of rounds 2-6 and after the last; the drafted round 5 dropped its.
    assert (on.ahead.run, on.ahead.used) == (6, 4)


def test_no_pass_runs_ahead_without_the_plain_hint_or_while_another_session_is_open(target: TargetModel, prompt: list[int]) -> None:
    _, scheduler, _ = decode(target, prompt, [PLAIN] * 4, ahead=True, plain=False)
    assert scheduler.ahead.run == 0
    _, scheduler, _ = decode(target, prompt, [PLAIN] * 4, ahead=True, open_sessions=2)
    assert scheduler.ahead.run == 0


def test_a_failed_pass_run_ahead_costs_only_the_head_start(target: TargetModel, prompt: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass run ahead that fails after writing its entry is dropped with it; every round is
    then answered by its own pass, with the same tokens."""
    plain, _, _ = decode(target, prompt, [PLAIN] * 6, ahead=False)
    run_ahead = Session.run_ahead

    def failing(self: Session) -> bool:
        run_ahead(self)
        raise RuntimeError("the pass failed")

    monkeypatch.setattr(Session, "run_ahead", failing)
    ahead, scheduler, _ = decode(target, prompt, [PLAIN] * 6, ahead=True)
    assert ahead.tokens == plain.tokens
    assert (scheduler.ahead.run, scheduler.ahead.used) == (0, 0)
    assert ahead.ahead is None and len(ahead.cache) == len(ahead.tokens) - 1


def test_an_ended_session_runs_nothing_ahead(target: TargetModel, prompt: list[int]) -> None:
    session, _, _ = decode(target, prompt, [PLAIN] * 3, ahead=False)
    assert session.run_ahead()  # the pass, here on the test's thread
    assert not session.run_ahead()  # one ran already
    session.drop_ahead()
    session.closed = True
    assert not session.run_ahead()
