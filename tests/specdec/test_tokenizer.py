"""The torch-free tokenizer agrees with transformers' tokenizer on the same files."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from tests.tokenizer_variants import write_altered_tokenizer

TEXTS = ["Hello, world!", "  leading spaces\tand tabs\n\nnew lines", "héllo wörld 你好 😀", "def f(x):\n    return x ** 2", ""]


@pytest.fixture(scope="module")
def hf_tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(str(tokenizer_dir("default")))


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_match_transformers(tokenizer: Tokenizer, hf_tokenizer, text: str) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(text)
    assert ids == hf_tokenizer.encode(text)
    assert tokenizer.decode(ids) == hf_tokenizer.decode(ids)


def test_chat_template_matches_transformers(tokenizer: Tokenizer, hf_tokenizer) -> None:  # type: ignore[no-untyped-def]
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Name a colour."},
    ]
    expected = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tokenizer.encode_chat(messages) == list(expected)
    assert tokenizer.render_chat(messages).endswith("<|im_start|>assistant\n")


def test_fingerprint_is_stable_and_sensitive(tokenizer: Tokenizer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = tokenizer_dir("default")
    assert Tokenizer(source).fingerprint == tokenizer.fingerprint
    assert Tokenizer(write_altered_tokenizer(tmp_path)).fingerprint != tokenizer.fingerprint


def test_eos_and_vocabulary(tokenizer: Tokenizer) -> None:
    assert tokenizer.vocab_size == 49152
    assert tokenizer.eos_token_ids == [2]
