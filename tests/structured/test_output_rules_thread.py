"""A session opens on the verifier's event-loop thread; its output rules must do no tensor work
there (a second thread running torch ops starts a second team of torch threads that spins beside
the passes' and slowed every pass of the service by ~75%). Their tensors are built at the first
round that needs them, on the pass thread."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from specdec.penalties import Penalties
from verifier_svc.output_rules import OutputOptions, OutputRules
from verifier_svc.token_tree import chain


def _tensor_ops(prof: profile) -> list[str]:
    return [event.name for event in prof.events() if event.name.startswith("aten::")]


def test_opening_output_rules_does_no_tensor_work() -> None:
    for options in (OutputOptions(), OutputOptions(penalties=Penalties(repetition_penalty=1.3, frequency_penalty=0.5), generated_tokens=2)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            OutputRules(options, [5, 6, 7, 8], 100, frozenset({2}), None)
        assert _tensor_ops(prof) == [], options


def test_penalty_state_built_later_counts_the_generated_tokens() -> None:
    rules = OutputRules(OutputOptions(penalties=Penalties(frequency_penalty=1.0), generated_tokens=2), [5, 6, 7, 7], 10, frozenset(), None)
    rules.commit([7, 9])
    logits = torch.zeros(3, 10)
    scores, allowed = rules.processed_logits(logits, chain([1, 2]))
    assert allowed is None
    # Row 0's context: generated 7, 7, 7, 9 (the prompt's 5, 6 are not counted by frequency).
    assert scores[0, 7].item() == -3.0 and scores[0, 9].item() == -1.0 and scores[0, 5].item() == 0.0
    rules.commit([9])  # after the tensors exist they are updated in place
    scores, _ = rules.processed_logits(logits, chain([1, 2]))
    assert scores[0, 9].item() == -2.0
