"""The drafter interface: everything the round loop (generation.py) asks of a drafter.

Shaped like Hugging Face's `CandidateGenerator`: `propose(context, budget, max_nodes) -> Draft`
and `observe(feedback)`. A drafter whose drafts cost model steps also says what they cost
(`step_seconds`, `catch_up_seconds`), stops where the session's policy says the next step would
not pay (`keep_drafting`), and has a prompt to read (`reads_prompt`, `reads_all_of`, `prefill`)
or, where its model is the target's copy, to take from the verifier (`takes_prompt_cache`);
a drafter with no such state keeps the defaults here: free steps, nothing to read. A drafter
that offers a free draft beside its model's (the hybrid drafter's copy) returns it from
`propose_copy`.

Concrete drafters subclass this Protocol to inherit its defaults (PEP 544).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from drafter_svc.draft import Draft, Feedback
from drafter_svc.draft_guide import DraftGuide
from specdec.v1.verifier_pb2 import PromptCache

# Asked before each model step of `propose`: (chain drafted so far, max depth, max nodes, seconds
# of one model step, seconds the first step takes beyond one step: the context it must read
# first, whether that is the session's prompt) -> draft the next token?
KeepDrafting = Callable[[Draft, int, int, float, float, bool], bool]


class Drafter(Protocol):
    """One object per generation session; it may keep incremental state between calls."""

    def propose(
        self, context: Sequence[int], budget: int, max_nodes: int | None = None, keep_drafting: KeepDrafting | None = None,
        guide: DraftGuide | None = None,
    ) -> Draft:
        """Draft a tree to follow `context`, the whole sequence so far (prompt + generated):
        no path longer than `budget` (>= 0) tokens, at most `max_nodes` nodes (default: budget,
        which allows only a chain). Within a session the context only grows, by the emitted
        tokens. A drafter that pays a model step per chain token asks `keep_drafting` (if given)
        before each step and stops where it says no; free drafters ignore it. Under a constraint
        the loop gives a model drafter `guide`, the grammar at the context's end (draft_guide.py):
        it drafts from q masked to the grammar; free drafters ignore it (their drafts are fitted
        to the grammar afterwards, grammar_drafts.py)."""
        ...

    def observe(self, feedback: Feedback) -> None:
        """Learn from the verifier's verdict on the last draft (default: nothing to learn; the
        emitted tokens arrive with the next context)."""

    @property
    def drafts_with_a_model(self) -> bool:
        """Each chain token costs a model step: the loop runs `propose` off the event loop, passes
        the policy's `keep_drafting`, and prices the steps (default: False, drafting is free)."""
        return False

    @property
    def step_seconds(self) -> float:
        """The running mean of one drafting step's seconds (default: 0, a free drafter)."""
        return 0.0

    def catch_up_seconds(self, context: Sequence[int]) -> float:
        """What the first step after `context` costs beyond one step: the tokens it must read
        first (default: 0, nothing to read)."""
        return 0.0

    @property
    def reads_prompt(self) -> bool:
        """The next step reads the session's prompt: nothing of it is read yet (default: False)."""
        return False

    def reads_all_of(self, prompt_tokens: int) -> bool:
        """Whether this drafter reads the whole of a prompt of `prompt_tokens` tokens (default:
        True: it reads the whole context)."""
        return True

    def prefill(self, context: Sequence[int]) -> None:
        """Read `context` now (the prompt, while the verifier runs its own prefill), so that the
        next propose reads only the tokens added since (default: nothing to read)."""

    def takes_prompt_cache(self, prompt: Sequence[int]) -> bool:
        """Whether this drafter would start from the target's own keys and values of `prompt`
        (its model is the target's copy) rather than read it: the loop then asks the verifier for
        them and hands them to `adopt_prompt_cache` (default: False)."""
        return False

    def adopt_prompt_cache(self, prompt: Sequence[int], cache: PromptCache) -> bool:
        """Start from the target's keys and values of `prompt`, if they fit this drafter's model;
        returns whether they were taken (default: False, nothing to start from)."""
        return False

    def propose_copy(self, context: Sequence[int], budget: int, max_nodes: int) -> Draft | None:
        """A free draft offered beside the model's, for the policy to weigh against drafting with
        the model (the hybrid drafter's copy); None: this drafter offers none (the default)."""
        return None
