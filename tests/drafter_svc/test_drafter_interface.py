"""drafter: the interface's defaults for drafters without state, and the hybrid drafter's
composition of a model drafter with a copy drafter."""

from __future__ import annotations

from collections.abc import Sequence

from drafter_svc.copy_drafter import CopyDrafter
from drafter_svc.draft import Draft, Feedback
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.drafter import Drafter, KeepDrafting
from drafter_svc.hybrid_drafter import HybridDrafter
from drafter_svc.ngram_drafter import NgramDrafter

CONTEXT = [1, 2, 3, 4, 1, 2, 3]


class CountingModel(Drafter):
    """A stand-in model drafter: drafts `[9] * budget`, asks `keep_drafting` once, has read nothing."""

    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.observed: list[Feedback] = []
        self.prefilled: list[int] = []

    def propose(
        self, context: Sequence[int], budget: int, max_nodes: int | None = None, keep_drafting: KeepDrafting | None = None,
        guide: DraftGuide | None = None,
    ) -> Draft:
        if keep_drafting is not None:
            self.asked.append(keep_drafting(Draft.point_masses([]), budget, max_nodes or budget, 0.01, 0.0, True))
        return Draft.point_masses([9] * budget)

    def observe(self, feedback: Feedback) -> None:
        self.observed.append(feedback)

    @property
    def drafts_with_a_model(self) -> bool:
        return True

    @property
    def step_seconds(self) -> float:
        return 0.01

    def catch_up_seconds(self, context: Sequence[int]) -> float:
        return 0.001 * len(context)

    @property
    def reads_prompt(self) -> bool:
        return not self.prefilled

    def reads_all_of(self, prompt_tokens: int) -> bool:
        return prompt_tokens <= 4

    def prefill(self, context: Sequence[int]) -> None:
        self.prefilled = list(context)


def test_free_drafters_keep_the_defaults_and_ignore_the_stop_rule() -> None:
    for drafter in (CopyDrafter(), NgramDrafter()):
        assert not drafter.drafts_with_a_model and drafter.step_seconds == 0.0 and not drafter.reads_prompt
        assert drafter.catch_up_seconds(CONTEXT) == 0.0 and drafter.reads_all_of(10**6)
        assert drafter.propose_copy(CONTEXT, 3, 3) is None
        drafter.prefill(CONTEXT)
        drafter.observe(Feedback(0, [], [], [5]))
        assert drafter.propose(CONTEXT, 3, 3, lambda *_: False) == drafter.propose(CONTEXT, 3, 3)


def test_hybrid_drafts_with_its_model_and_offers_its_copies_beside() -> None:
    model = CountingModel()
    hybrid = HybridDrafter(model, CopyDrafter())
    assert hybrid.propose(CONTEXT, 2, 2, lambda *_: True).token_ids == [9, 9] and model.asked == [True]
    assert hybrid.propose_copy(CONTEXT, 3, 3) == CopyDrafter().propose(CONTEXT, 3, 3)
    assert hybrid.drafts_with_a_model and hybrid.step_seconds == 0.01 and hybrid.reads_prompt
    assert hybrid.catch_up_seconds(CONTEXT) == model.catch_up_seconds(CONTEXT)
    assert hybrid.reads_all_of(4) and not hybrid.reads_all_of(5)
    hybrid.prefill(CONTEXT)
    assert model.prefilled == CONTEXT and not hybrid.reads_prompt
    feedback = Feedback(2, [0], [1.0, 0.0], [9, 5])
    hybrid.observe(feedback)
    assert model.observed == [feedback]
