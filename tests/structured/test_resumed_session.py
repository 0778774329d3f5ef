"""A session re-opened after a broken stream (OpenSession.generated_tokens) continues exactly:
its constraint has consumed the generated tokens and its penalties count them as output."""

from __future__ import annotations


import pytest

from specdec.grammar import GrammarCompiler
from specdec.penalties import Penalties
from specdec.sampling_params import SamplingParams
from tests.structured.reference import CONSTRAINTS, tiny_model
from verifier_svc.output_rules import OutputOptions
from verifier_svc.round_input import Limits, RoundInput
from verifier_svc.session import Session
from verifier_svc.target_model import TargetModel

pytestmark = pytest.mark.usefixtures("one_thread")

LIMITS = Limits(max_draft_tokens=16, max_draft_depth=8, context_length=512)
PROMPT = [1, 504, 2483, 314, 5019, 28]
PENALTIES = Penalties(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.25)


def greedy(target: TargetModel, compiler: GrammarCompiler, prompt: list[int], generated: int, steps: int) -> list[int]:
    output = OutputOptions(constraint=CONSTRAINTS["order"], penalties=PENALTIES, generated_tokens=generated)
    s = Session(target, prompt, SamplingParams(temperature=0.0), 0, LIMITS, output=output, compiler=compiler, eos_token_ids=frozenset([2]))
    return [s.verify(RoundInput.point_masses([])).next_token for _ in range(steps)]


def test_a_resumed_session_continues_the_interrupted_one(tokenizer) -> None:  # type: ignore[no-untyped-def]
    target = TargetModel(tiny_model(tokenizer.vocab_size), "tiny")
    compiler = GrammarCompiler(tokenizer.to_json(), tokenizer.eos_token_ids, tokenizer.vocab_size)
    whole = greedy(target, compiler, PROMPT, 0, 12)
    assert greedy(target, compiler, PROMPT + whole[:6], 6, 6) == whole[6:]
    # Had the same tokens been prompt, the penalties and the grammar would see another context.
    assert greedy(target, compiler, PROMPT + whole[:6], 0, 6) != whole[6:]
