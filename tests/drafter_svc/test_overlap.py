"""overlap: a round pre-drafted during verification is used only when the verdict agrees with its
guess, and is then what the drafter would draft for the committed context."""

from __future__ import annotations

from drafter_svc.copy_drafter import CopyDrafter
from drafter_svc.draft import Draft
from drafter_svc.overlap import Prefetcher

PERIOD = list(range(1, 11))
CONTEXT = PERIOD * 3 + [1, 2, 3]  # the copy drafter continues 4, 5, 6, ...


def test_a_hit_is_the_draft_for_the_committed_context() -> None:
    sent = CopyDrafter().propose(CONTEXT, 4)
    assert sent.token_ids == [4, 5, 6, 7]
    prefetcher = Prefetcher(CopyDrafter())
    prefetcher.start(CONTEXT, sent, budget=4, max_nodes=4)
    ahead = prefetcher.take([0, 1, 2, 3], next_token=8)  # all accepted, bonus 8 as guessed
    committed = CONTEXT + [4, 5, 6, 7, 8]
    assert ahead == CopyDrafter().propose(committed, 4) == Draft.point_masses([9, 10, 1, 2])


def test_a_verdict_that_differs_discards_the_pre_draft() -> None:
    sent = CopyDrafter().propose(CONTEXT, 4)
    prefetcher = Prefetcher(CopyDrafter())
    for accepted, next_token in [([0, 1], 9), ([0, 1, 2, 3], 42), ([], 4)]:
        prefetcher.start(CONTEXT, sent, budget=4, max_nodes=4)
        assert prefetcher.take(accepted, next_token) is None
    assert prefetcher.take([0, 1, 2, 3], 8) is None  # each pre-draft is taken at most once


def test_an_empty_round_pre_drafts_from_the_sampled_token() -> None:
    prefetcher = Prefetcher(CopyDrafter())
    prefetcher.start(CONTEXT, Draft.point_masses([]), budget=3, max_nodes=3)
    assert prefetcher.take([], next_token=4) == Draft.point_masses([5, 6, 7])
    prefetcher.start(CONTEXT, Draft.point_masses([]), budget=0, max_nodes=3)
    assert prefetcher.take([], next_token=4) is None  # no room left: nothing pre-drafted
