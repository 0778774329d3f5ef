"""Structured output, logprobs, penalties and logit bias through the gateway, with the official
`openai` package, against `specdec.Client` on the same drafter (the package's cluster).

A json_schema response parses and validates, and at temperature 0 is the client's output under
the same constraint; json_object gives an object; logprobs come for every token, streamed equal
to whole, the alternatives sorted and as many as asked, the client's numbers; penalties and a
logit bias reach the verifier (the client's output under them; a -100 bias on the greedy first
token changes it). Logprobs are compared to LOGPROB_ATOL: the verifier computes them in float32
inside whatever tree a round drafted, and two runs of a request draft different trees.
"""

from __future__ import annotations

import json

import jsonschema

from specdec.client import Client, GenerationResult
from specdec.penalties import Penalties
from tests.gateway.conftest import Gateway
from tests.gateway.test_openai_api import MESSAGES, MODEL, PROMPT
from tests.structured.test_structured_services import SCHEMA

EXTRACT = [{"role": "user", "content": "Extract the person as JSON with name, age and city: Marie is 34 and lives in Paris."}]
TOP = 5
LOGPROB_ATOL = 1e-4


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= LOGPROB_ATOL for x, y in zip(a, b))


def same_entries(a: list, b: list) -> bool:  # type: ignore[type-arg]
    """Chat logprob entries: the same tokens and alternatives, logprobs within LOGPROB_ATOL."""
    tokens = [(e.token, e.bytes, [(x.token, x.bytes) for x in e.top_logprobs]) for e in a]
    return tokens == [(e.token, e.bytes, [(x.token, x.bytes) for x in e.top_logprobs]) for e in b] and close(
        [x.logprob for e in a for x in (e, *e.top_logprobs)], [x.logprob for e in b for x in (e, *e.top_logprobs)])


def reference(gateway: Gateway, **kwargs) -> GenerationResult:  # type: ignore[no-untyped-def]
    with Client(gateway.cluster.address) as client:
        return client.generate(**kwargs)


def chat_chunks(stream) -> tuple[str, list]:  # type: ignore[no-untyped-def]
    """(text, logprob entries) of a streamed chat completion."""
    text, entries = "", []
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            if chunk.choices[0].logprobs is not None:
                entries.extend(chunk.choices[0].logprobs.content)
    return text, entries


def test_json_schema_output_validates_and_is_the_clients(gateway: Gateway) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    chat = gateway.client().chat.completions.create(model=MODEL, messages=EXTRACT, max_tokens=40, temperature=0,
                                                    response_format=response_format)  # type: ignore[arg-type]
    text = chat.choices[0].message.content
    assert chat.choices[0].finish_reason == "stop", text
    jsonschema.validate(json.loads(text), SCHEMA)
    assert text == reference(gateway, messages=EXTRACT, max_new_tokens=40, temperature=0, json_schema=json.dumps(SCHEMA)).text
    streamed, _ = chat_chunks(gateway.client().chat.completions.create(
        model=MODEL, messages=EXTRACT, max_tokens=40, temperature=0, response_format=response_format, stream=True))  # type: ignore[arg-type]
    assert streamed == text


def test_json_object_and_the_structured_outputs_extension(gateway: Gateway) -> None:
    client = gateway.client()
    chat = client.chat.completions.create(model=MODEL, messages=EXTRACT, max_tokens=60, temperature=0,
                                          response_format={"type": "json_object"})
    assert chat.choices[0].finish_reason == "stop" and isinstance(json.loads(chat.choices[0].message.content), dict)
    digits = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0,
                                       extra_body={"structured_outputs": {"regex": "[0-9]{3}"}})
    assert digits.choices[0].text.isdigit() and len(digits.choices[0].text) == 3
    assert digits.choices[0].text == reference(gateway, prompt=PROMPT, max_new_tokens=6, temperature=0, regex="[0-9]{3}").text


def test_chat_logprobs_for_every_token_streamed_equal_whole_and_the_clients(gateway: Gateway, tokenizer) -> None:  # type: ignore[no-untyped-def]
    client = gateway.client()
    args = dict(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, logprobs=True, top_logprobs=TOP)
    whole = client.chat.completions.create(**args)  # type: ignore[call-overload]
    entries = whole.choices[0].logprobs.content
    assert len(entries) == whole.usage.completion_tokens == 12
    for entry in entries:
        assert len(entry.top_logprobs) == TOP and entry.logprob <= 0
        assert [a.logprob for a in entry.top_logprobs] == sorted((a.logprob for a in entry.top_logprobs), reverse=True)
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].logprob == entry.logprob  # greedy: the argmax
        assert bytes(entry.bytes).decode(errors="backslashreplace") == entry.token
    assert "".join(e.token for e in entries) == whole.choices[0].message.content
    text, streamed = chat_chunks(client.chat.completions.create(**args, stream=True))  # type: ignore[call-overload]
    assert text == whole.choices[0].message.content
    assert same_entries(streamed, entries)
    ours = reference(gateway, messages=MESSAGES, max_new_tokens=12, temperature=0, logprobs=True, top_logprobs=TOP)
    assert [t for t in ours.token_ids] == [x.token_id for x in ours.logprobs]
    assert [[tokenizer.decode([t]) for t, _ in x.top] for x in ours.logprobs] == [
        [bytes(a.bytes).decode(errors="replace") for a in e.top_logprobs] for e in entries]
    assert close([e.logprob for e in entries], [lp.logprob for lp in ours.logprobs])
    assert close([a.logprob for e in entries for a in e.top_logprobs], [lp for x in ours.logprobs for _, lp in x.top])
    plain = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, temperature=0)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_in_the_legacy_shape(gateway: Gateway) -> None:
    client = gateway.client()
    args = dict(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0.7, seed=4, logprobs=3)
    whole = client.completions.create(**args)  # type: ignore[call-overload]
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == whole.usage.completion_tokens
    assert all(3 <= len(top) <= 4 and top[token] == logprob for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    merged: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for chunk in client.completions.create(**args, stream=True):  # type: ignore[call-overload]
        if chunk.choices and chunk.choices[0].logprobs is not None:
            for key in merged:
                merged[key].extend(getattr(chunk.choices[0].logprobs, key))
    assert (merged["tokens"], merged["text_offset"]) == (lp.tokens, lp.text_offset)
    assert close(merged["token_logprobs"], lp.token_logprobs)
    assert [list(top) for top in merged["top_logprobs"]] == [list(top) for top in lp.top_logprobs]
    ours = reference(gateway, prompt=PROMPT, max_new_tokens=10, temperature=0.7, seed=4, logprobs=True, top_logprobs=3)
    assert close(lp.token_logprobs, [x.logprob for x in ours.logprobs])


def test_penalties_and_logit_bias_reach_the_verifier(gateway: Gateway, tokenizer) -> None:  # type: ignore[no-untyped-def]
    client = gateway.client()
    penalized = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, frequency_penalty=1.5, presence_penalty=0.5,
        extra_body={"repetition_penalty": 1.3, "min_tokens": 4},
    )
    ours = reference(gateway, messages=MESSAGES, max_new_tokens=16, temperature=0,
                     penalties=Penalties(repetition_penalty=1.3, frequency_penalty=1.5, presence_penalty=0.5, min_tokens=4))
    plain = reference(gateway, messages=MESSAGES, max_new_tokens=16, temperature=0)
    assert penalized.choices[0].message.content == ours.text != plain.text
    first = plain.token_ids[0]
    biased = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0, logprobs=True,
                                            logit_bias={str(first): -100})
    assert biased.choices[0].logprobs.content[0].token != tokenizer.decode([first])
    assert not biased.choices[0].message.content.startswith(tokenizer.decode([first]))
