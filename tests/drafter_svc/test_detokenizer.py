"""IncrementalDetokenizer: streamed text equals the full decode, never half a character."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from drafter_svc.detokenizer import IncrementalDetokenizer
from specdec.tokenizer import Tokenizer

TEXTS = [
    "Héllo wörld, ça va? Naïve façade — déjà vu… Ångström, Øre, Łódź, İstanbul.",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 🎉🦜👩‍👩‍👧‍👦🏳️‍🌈 and flags 🇫🇷🇯🇵, math ∑∫√∞ ≠ ≤, arrows ⟶ ⇒.",
    'def greet(name: str) -> str:\n    """Say hi 👋."""\n'
    '    return f"¡Hola, {name}!"  # café\n\n\tx = [1, 2]\n',
    "  leading spaces, trailing spaces   \n\n\nnew lines\r\nand\ttabs   ",
    "<|im_start|>assistant\nSpecial tokens stay: ok<|im_end|>",
]

Decode = Callable[[list[int]], str]


def stream(detokenizer: IncrementalDetokenizer, ids: Sequence[int], chunk_sizes: Sequence[int]) -> list[str]:
    pieces, start = [], 0
    for size in chunk_sizes:
        pieces.append(detokenizer.push(ids[start : start + size]))
        start += size
    assert start >= len(ids)
    pieces.append(detokenizer.flush())
    return pieces


@pytest.fixture(scope="module")
def real_tokenizer(tokenizer: Tokenizer) -> tuple[Callable[[str], list[int]], Decode]:
    """SmolLM2's byte-level BPE tokenizer, as the drafter service uses it."""
    return (lambda text: tokenizer.encode(text, add_special_tokens=False), tokenizer.decode)


def test_real_tokenizer_splits_characters_across_tokens(real_tokenizer: tuple[Callable, Decode]) -> None:
    # Guards the tests below: they only prove something if some tokens end inside a character.
    encode, decode = real_tokenizer
    ids = encode("".join(TEXTS))
    assert any("\ufffd" in decode([token]) for token in ids)


@pytest.mark.parametrize("text", TEXTS)
def test_streaming_one_token_at_a_time_equals_the_full_decode(
    real_tokenizer: tuple[Callable, Decode], text: str
) -> None:
    encode, decode = real_tokenizer
    ids = encode(text)
    pieces = stream(IncrementalDetokenizer(decode), ids, [1] * len(ids))
    assert "".join(pieces) == decode(ids) == text
    assert all("\ufffd" not in piece for piece in pieces)


def test_streaming_random_chunks_after_a_prompt_equals_the_full_decode(
    real_tokenizer: tuple[Callable, Decode],
) -> None:
    encode, decode = real_tokenizer
    rng = random.Random(2024)
    for trial in range(30):
        prompt = encode(rng.choice(TEXTS)) if trial % 2 else []
        text = "".join(rng.sample(TEXTS, k=rng.randint(1, len(TEXTS))))
        ids = encode(text)
        sizes = []
        while sum(sizes) < len(ids):
            sizes.append(rng.randint(0, 9))
        detokenizer = IncrementalDetokenizer(decode, prompt)
        released = ""
        for piece in stream(detokenizer, ids, sizes):
            assert "\ufffd" not in piece
            released += piece
            assert decode(ids).startswith(released)
        assert released == decode(ids)


def byte_level(vocab: dict[int, bytes]) -> Decode:
    return lambda ids: b"".join(vocab[t] for t in ids).decode("utf-8", errors="replace")


def test_holds_back_an_unfinished_character() -> None:
    smile = "🙂".encode()
    decode = byte_level({1: b"hi ", 2: smile[:2], 3: smile[2:], 4: b"!"})
    detokenizer = IncrementalDetokenizer(decode)
    assert detokenizer.push([1, 2]) == "hi "
    assert detokenizer.push([3]) == "🙂"
    assert detokenizer.push([4]) == "!"
    assert detokenizer.flush() == ""


def test_flush_releases_an_unfinished_character_as_replacement() -> None:
    decode = byte_level({1: b"a", 2: "é".encode()[:1]})
    detokenizer = IncrementalDetokenizer(decode)
    assert detokenizer.push([1, 2]) == "a"
    assert detokenizer.flush() == "\ufffd"
    assert detokenizer.flush() == ""


def sentencepiece_like(pieces: dict[int, str]) -> Decode:
    """Decodes like SentencePiece: "▁" is a space, and the first piece loses its leading one."""
    return lambda ids: "".join(pieces[t] for t in ids).replace("▁", " ").removeprefix(" ")


def test_keeps_the_spaces_a_space_stripping_decoder_drops() -> None:
    decode = sentencepiece_like({1: "▁Hello", 2: "▁world", 3: ",", 4: "▁again"})
    detokenizer = IncrementalDetokenizer(decode)
    assert [detokenizer.push([t]) for t in (1, 2, 3, 4)] == ["Hello", " world", ",", " again"]
    naive = "".join(decode([t]) for t in (1, 2, 3, 4))
    assert naive == "Helloworld,again"  # what decoding each token alone would have streamed


def test_the_prompt_gives_the_first_generated_token_its_space() -> None:
    decode = sentencepiece_like({1: "▁Hello", 2: "▁world", 3: "!"})
    detokenizer = IncrementalDetokenizer(decode, prompt_token_ids=[1])
    assert detokenizer.push([2, 3]) == " world!"


def test_empty_pushes_release_nothing() -> None:
    detokenizer = IncrementalDetokenizer(byte_level({1: b"x"}), [1])
    assert detokenizer.push([]) == ""
    assert detokenizer.flush() == ""
