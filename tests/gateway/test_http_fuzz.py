"""Validation fuzzing of the gateway over HTTP (the HTTP target beside tests/integration/test_fuzz.py).

Hypothesis builds request bodies for both generation endpoints: OpenAI's fields (penalties,
logit_bias, logprobs, response_format among them) and our extensions (structured_outputs too)
with values of every JSON type (numbers out of range, NaN spelled as JSON allows
Python to, nested junk), plus bodies that are not JSON or not objects. Every case must end with
a status within its timeout: never a 5xx (an unhandled error) and never a hang; every error is
OpenAI's error JSON. Valid cases are kept cheap (at most 2 new tokens). Fixed seed, bounded count.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.gateway.conftest import TOKEN, Gateway

pytestmark = pytest.mark.slow
CASES = 100
TIMEOUT = 30.0
FUZZ = settings(max_examples=CASES, derandomize=True, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                suppress_health_check=list(HealthCheck))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(-3, 40),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -1.0, 1e-9, 2.0, 1e39]),
    st.text(max_size=12), st.sampled_from(["", "copy", "ngram", "fixed", "exact", "lenient:0.5", "mentored:-1", "SmolLM2-135M-Instruct"]),
)
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=6)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "", "tool"]) | junk,
                                 "content": st.text(max_size=20) | junk})
speculation = st.fixed_dictionaries({}, optional={
    "drafter": junk, "num_draft_tokens": st.integers(-2, 20) | junk, "max_tree_nodes": st.integers(-2, 40),
    "draft_policy": junk, "overlap": junk, "acceptance": junk, "depth": junk,
})
logit_bias = st.dictionaries(st.integers(-3, 60000).map(str) | st.text(max_size=4), st.floats(-150, 150) | junk, max_size=3)
schema = st.sampled_from([{}, {"type": "object"}, {"type": "integer"}, {"type": "bogus"}, {"enum": ["a", "b"]}, {"$ref": "#/nope"}]) | junk
response_format = st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema", "xml"]) | junk}, optional={
    "json_schema": st.fixed_dictionaries({"schema": schema}, optional={"name": junk, "strict": junk}) | junk})
structured_outputs = st.fixed_dictionaries({}, optional={
    "json": schema, "regex": st.sampled_from(["[a-z]+", "(?=a)b", "(", "x{2}"]) | junk,
    "grammar": st.sampled_from(['start: "x"', "start: nope", "root ::= [0-9]"]) | junk, "choice": junk,
})
shared = {
    "model": st.sampled_from(["SmolLM2-135M-Instruct", "gpt-4o"]) | junk, "max_tokens": st.integers(-2, 2) | junk,
    "temperature": junk, "top_p": junk, "top_k": junk, "seed": junk, "stop": junk, "n": st.integers(-1, 3) | junk,
    "stream": st.booleans() | junk, "stream_options": junk, "user": junk, "speculation": speculation | junk, "unknown_field": junk,
    "frequency_penalty": st.floats(-3, 3) | junk, "presence_penalty": st.floats(-3, 3) | junk, "repetition_penalty": st.floats(-1, 11) | junk,
    "min_tokens": st.integers(-2, 3) | junk, "logit_bias": logit_bias | junk, "response_format": response_format | junk,
    "structured_outputs": structured_outputs | junk,
}
chat = st.fixed_dictionaries({"messages": st.lists(message, max_size=3) | junk},
                             optional={**shared, "max_completion_tokens": st.integers(-1, 2) | junk,
                                       "logprobs": st.booleans() | junk, "top_logprobs": st.integers(-1, 21) | junk, "tools": junk})
completion = st.fixed_dictionaries({"prompt": st.text(max_size=20) | st.lists(st.integers(-5, 60000), max_size=4) | junk},
                                   optional={**shared, "echo": junk, "best_of": junk, "suffix": junk,
                                             "logprobs": st.integers(-1, 6) | junk})


def cheap(body: object) -> object:
    """At most 2 new tokens for a body that might be valid: unset or null would ask for the
    drafter's cap; other junk (strings, lists, 0 or less) is refused anyway."""
    if isinstance(body, dict):
        for key in ("max_tokens", "max_completion_tokens"):
            value = body.get(key)
            if value is None or isinstance(value, (int, float)) and not isinstance(value, bool) and value > 2:
                body[key] = 2
    return body


def check(gateway: Gateway, path: str, raw: bytes) -> int:
    status, headers, data = gateway.http("POST", path, raw, TOKEN, timeout=TIMEOUT)
    assert status < 500, (raw[:300], status, data[:300])
    if status >= 400:
        error = json.loads(data)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], data
    elif headers.get("content-type", "").startswith("text/event-stream"):
        events = [line for line in data.decode().splitlines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and not any('"error"' in e for e in events), data[-300:]
    return status


@pytest.mark.parametrize("path, bodies", [("/v1/chat/completions", chat), ("/v1/completions", completion)])
def test_fuzzed_bodies_get_answers_never_5xx(gateway: Gateway, path: str, bodies: st.SearchStrategy) -> None:
    seen: set[int] = set()

    @FUZZ
    @given(body=bodies.map(cheap))
    def case(body: object) -> None:
        seen.add(check(gateway, path, json.dumps(body).encode()))

    case()
    assert 200 in seen and 400 in seen, seen  # both valid and refused requests were exercised


@FUZZ
@given(raw=st.binary(max_size=64) | st.sampled_from([b"", b"null", b"[]", b"3", b'"x"', b"{", b'{"messages": NaN}',
                                                     b'{"prompt": "x", "temperature": Infinity}']))
def test_bodies_that_are_not_objects_get_400(gateway: Gateway, raw: bytes) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        assert check(gateway, path, raw) == 400
