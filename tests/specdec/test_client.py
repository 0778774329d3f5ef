"""Client request building (the wire format a user's arguments turn into)."""

from __future__ import annotations

import pytest

from specdec.client import build_request


def test_build_request_sets_presence_fields() -> None:
    request = build_request("hi", temperature=0.0, seed=7, num_draft_tokens=0, stop=["\n"])
    assert request.text == "hi" and request.sampling.HasField("temperature") and request.sampling.temperature == 0.0
    assert request.sampling.seed == 7 and request.speculation.HasField("num_draft_tokens")
    assert request.speculation.num_draft_tokens == 0 and list(request.stop) == ["\n"]
    unset = build_request("hi")
    assert not unset.sampling.HasField("seed") and not unset.speculation.HasField("num_draft_tokens")


def test_build_request_prompt_kinds() -> None:
    chat = build_request(messages=[{"role": "user", "content": "yo"}])
    assert chat.WhichOneof("prompt") == "chat" and chat.chat.messages[0].content == "yo"
    assert build_request(token_ids=[1, 2]).token_ids.ids == [1, 2]
    with pytest.raises(ValueError):
        build_request("a", token_ids=[1])
