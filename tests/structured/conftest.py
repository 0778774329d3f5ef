"""Fixtures the structured-output tests share: the grammar compiler over the default tokenizer,
a tiny random-weight target with that tokenizer's vocabulary, and one torch thread for modules
that run such tiny passes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from specdec.grammar import GrammarCompiler
from tests.structured.reference import tiny_model
from verifier_svc.target_model import TargetModel


@pytest.fixture(scope="module")
def compiler(tokenizer) -> GrammarCompiler:  # type: ignore[no-untyped-def]
    return GrammarCompiler(tokenizer.to_json(), tokenizer.eos_token_ids, tokenizer.vocab_size)


@pytest.fixture(scope="module")
def tiny(tokenizer) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(tiny_model(tokenizer.vocab_size), "tiny")


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """The tiny model's passes and the [rows, vocab] ops are too small to share out: on a busy
    2-core machine two threads spend most of their time waiting for each other (20x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
