"""The `hybrid` drafter: a model drafter with the free copy drafter beside it.

Each round the copy drafter proposes too (a table lookup, `propose_copy`), and the session's
policy sends that draft instead of drafting with the model when it expects more tokens per unit
of cost from it (docs/design/hybrid-drafter.md). Everything else is the model drafter's. Which
draft is sent is chosen from the emitted history only, and each declares its q (a copy's is a
point mass), so exactness does not depend on the choice.
"""

from __future__ import annotations

from collections.abc import Sequence

from drafter_svc.draft import Draft, Feedback
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.drafter import Drafter, KeepDrafting
from specdec.v1.verifier_pb2 import PromptCache


class HybridDrafter(Drafter):
    """`model`'s drafts, steps and prompt read, with `copier`'s drafts offered beside them."""

    def __init__(self, model: Drafter, copier: Drafter) -> None:
        self.model = model
        self.copier = copier

    def propose(
        self, context: Sequence[int], budget: int, max_nodes: int | None = None, keep_drafting: KeepDrafting | None = None,
        guide: DraftGuide | None = None,
    ) -> Draft:
        return self.model.propose(context, budget, max_nodes, keep_drafting, guide)

    def propose_copy(self, context: Sequence[int], budget: int, max_nodes: int) -> Draft | None:
        return self.copier.propose(context, budget, max_nodes)

    def observe(self, feedback: Feedback) -> None:
        self.model.observe(feedback)

    @property
    def drafts_with_a_model(self) -> bool:
        return self.model.drafts_with_a_model

    @property
    def step_seconds(self) -> float:
        return self.model.step_seconds

    def catch_up_seconds(self, context: Sequence[int]) -> float:
        return self.model.catch_up_seconds(context)

    @property
    def reads_prompt(self) -> bool:
        return self.model.reads_prompt

    def reads_all_of(self, prompt_tokens: int) -> bool:
        return self.model.reads_all_of(prompt_tokens)

    def prefill(self, context: Sequence[int]) -> None:
        self.model.prefill(context)

    def takes_prompt_cache(self, prompt: Sequence[int]) -> bool:
        return self.model.takes_prompt_cache(prompt)

    def adopt_prompt_cache(self, prompt: Sequence[int], cache: PromptCache) -> bool:
        return self.model.adopt_prompt_cache(prompt, cache)
