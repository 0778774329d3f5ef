"""Token bytes from the tokenizer and logprobs in OpenAI's shapes: pure, no servers."""

from __future__ import annotations

import pytest

from gateway_svc.logprobs import ChatLogprobs, CompletionLogprobs
from gateway_svc.token_bytes import TokenBytes
from specdec.client import TokenLogprob
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer

TEXT = "Héllo wörld — 日本語 ok"


@pytest.fixture(scope="module")
def token_bytes() -> TokenBytes:
    return TokenBytes(tokenizer_dir("default") / "tokenizer.json")


def test_token_bytes_concatenate_to_the_decoded_text(token_bytes: TokenBytes, tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    assert b"".join(token_bytes.bytes_of(i) for i in ids).decode() == tokenizer.decode(ids) == TEXT
    assert any("\\x" in token_bytes.text_of(i) for i in ids)  # a token ending inside a character
    eos = tokenizer.eos_token_ids[0]
    assert token_bytes.text_of(eos) == tokenizer.decode([eos])  # special tokens spelled as they are


def test_completion_blocks_concatenate_and_offsets_point_into_the_text(token_bytes: TokenBytes, tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    logprobs = [TokenLogprob(t, -0.25 * i, ((t, -0.25 * i), (ids[0], -9.0))) for i, t in enumerate(ids)]
    whole = CompletionLogprobs(token_bytes).block(logprobs)
    streamed = CompletionLogprobs(token_bytes)
    blocks = [streamed.block(logprobs[i : i + 3]) for i in range(0, len(logprobs), 3)]
    for key in whole:
        assert [x for b in blocks for x in b[key]] == whole[key], key
    assert whole["token_logprobs"] == [lp.logprob for lp in logprobs]
    for token, offset in zip(whole["tokens"], whole["text_offset"]):
        if "\\x" not in token:
            assert TEXT[offset:].startswith(token), (token, offset)
    assert all(whole["tokens"][i] in top for i, top in enumerate(whole["top_logprobs"]))  # the sampled token is among them


def test_chat_entries_carry_token_bytes_and_the_alternatives_in_order(token_bytes: TokenBytes, tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("Paris", add_special_tokens=False)
    block = ChatLogprobs(token_bytes).block([TokenLogprob(ids[0], -0.1, ((ids[0], -0.1), (11, -2.0)))])
    entry = block["content"][0]
    assert bytes(entry["bytes"]).decode() == entry["token"] == tokenizer.decode(ids[:1]) and entry["logprob"] == -0.1
    assert [a["logprob"] for a in entry["top_logprobs"]] == [-0.1, -2.0] and block["refusal"] is None
