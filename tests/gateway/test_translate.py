"""The gateway's pure parts: OpenAI requests to GenerateRequest, drafter statuses to OpenAI
errors, pydantic's errors to the field the client wrote. No servers."""

from __future__ import annotations

import json

import grpc
import pytest
from pydantic import ValidationError

from gateway_svc.app import field_path, validation_failure
from gateway_svc.errors import OpenAIError, from_rpc_error, openai_field
from gateway_svc.schema import ChatCompletionRequest, CompletionRequest
from gateway_svc.translate import chat_request, completion_request, finish_reason

USER = [{"role": "user", "content": "Hi"}]


def rpc_error(code: grpc.StatusCode, details: str, trailing: tuple = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


def test_chat_request_carries_every_field() -> None:
    body = ChatCompletionRequest.model_validate({
        "model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
        "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": -1,
        "stop": "\n", "speculation": {"drafter": "ngram", "num_draft_tokens": 3, "max_tree_nodes": 5, "draft_policy": "fixed",
                                      "overlap": False, "acceptance": "lenient:0.5"},
        "stream": True, "stream_options": {"include_usage": True}, "user": "u1", "n": 1,
    })
    t = chat_request(body, default_max_tokens=512)
    r = t.request
    assert [(m.role, m.content) for m in r.chat.messages] == [("system", "Be brief."), ("user", "Hi there")]
    assert r.max_new_tokens == 7 and t.max_tokens_field == "max_completion_tokens" and t.prompt_field == "messages"
    assert (round(r.sampling.temperature, 6), round(r.sampling.top_p, 6), r.sampling.top_k) == (0.5, 0.9, 40)
    assert r.sampling.seed == 2**64 - 1  # OpenAI's signed seed, modulo 2**64
    assert list(r.stop) == ["\n"]
    s = r.speculation
    assert (s.drafter, s.num_draft_tokens, s.max_tree_nodes, s.draft_policy, s.overlap) == ("ngram", 3, 5, "fixed", False)
    assert s.HasField("overlap") and (r.acceptance.rule, r.acceptance.parameter) == ("lenient", 0.5)
    assert t.stream and t.include_usage


def test_defaults_leave_the_drafter_its_own() -> None:
    t = completion_request(CompletionRequest.model_validate({"prompt": "Once"}), default_max_tokens=512)
    r = t.request
    assert r.text == "Once" and r.max_new_tokens == 512 and t.prompt_field == "prompt" and not t.stream
    assert r.sampling.temperature == 1.0 and r.sampling.top_k == 0 and not r.sampling.HasField("seed")
    assert not r.speculation.HasField("num_draft_tokens") and not r.speculation.HasField("overlap")
    assert not r.HasField("acceptance")
    assert completion_request(CompletionRequest.model_validate({"prompt": [1, 2, 3], "top_k": -1}), 8).request.token_ids.ids == [1, 2, 3]
    assert completion_request(CompletionRequest.model_validate({"prompt": ["one"]}), 8).request.text == "one"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"n": 5}, "n"),
        ({"logit_bias": {"the": 3}}, "logit_bias"),
        ({"logit_bias": {"-1": 3}}, "logit_bias"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a+"}}, "structured_outputs.regex"),
        ({"structured_outputs": {"regex": "a+", "grammar": "start: \"a\""}}, "structured_outputs.grammar"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"speculation": {"acceptance": "lenient:half"}}, "speculation.acceptance"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    ],
)
def test_unsupported_chat_fields_are_refused_by_name(body: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        chat_request(ChatCompletionRequest.model_validate({"messages": USER, **body}), 16)
    assert (caught.value.status, caught.value.param) == (400, param)
    assert caught.value.message.startswith(param)


@pytest.mark.parametrize("body, param", [({"echo": True}, "echo"), ({"best_of": 3}, "best_of"), ({"suffix": "x"}, "suffix"),
                                         ({"prompt": ["a", "b"]}, "prompt"), ({"logprobs": 6}, "logprobs"),
                                         ({"logprobs": -1}, "logprobs")])
def test_unsupported_completion_fields_are_refused_by_name(body: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        completion_request(CompletionRequest.model_validate({"prompt": "x", **body}), 16)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_output_fields_map_to_the_constraint_penalties_and_logprobs() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = ChatCompletionRequest.model_validate({
        "messages": USER, "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}},
        "logprobs": True, "top_logprobs": 3, "frequency_penalty": 0.5, "presence_penalty": -1, "logit_bias": {"42": -100, "7": 2.5},
        "repetition_penalty": 1.2, "min_tokens": 4,
    })
    r = chat_request(body, 16).request
    assert json.loads(r.constraint.json_schema) == schema and r.logprobs and r.top_logprobs == 3
    p = r.penalties
    assert (p.frequency_penalty, p.presence_penalty, round(p.repetition_penalty, 6), p.min_tokens) == (0.5, -1, 1.2, 4)
    assert dict(zip(p.logit_bias_token_ids, p.logit_bias_values)) == {42: -100, 7: 2.5}
    plain = chat_request(ChatCompletionRequest.model_validate({"messages": USER, "response_format": {"type": "text"}}), 16).request
    assert not plain.HasField("constraint") and not plain.HasField("penalties") and not plain.logprobs
    any_object = chat_request(ChatCompletionRequest.model_validate({"messages": USER, "response_format": {"type": "json_object"}}), 16)
    assert json.loads(any_object.request.constraint.json_schema) == {"type": "object"}
    for extension, kind in (({"json": schema}, "json_schema"), ({"json": json.dumps(schema)}, "json_schema"),
                            ({"regex": "[0-9]+"}, "regex"), ({"grammar": 'start: "x"'}, "grammar")):
        t = completion_request(CompletionRequest.model_validate({"prompt": "x", "structured_outputs": extension}), 16)
        assert t.request.constraint.WhichOneof("kind") == kind
        assert t.rules.renames[f"constraint.{kind}"] == f"structured_outputs.{next(iter(extension))}"
    legacy = completion_request(CompletionRequest.model_validate({"prompt": "x", "logprobs": 0}), 16).request
    assert legacy.logprobs and legacy.top_logprobs == 0
    assert not completion_request(CompletionRequest.model_validate({"prompt": "x"}), 16).request.logprobs


@pytest.mark.parametrize(
    "details, body, param",
    [
        ("penalties.frequency_penalty: must be in [-2, 2], got 3.0", {"messages": USER}, "frequency_penalty"),
        ("penalties.logit_bias_token_ids: token id 99999 is outside the vocabulary", {"messages": USER}, "logit_bias"),
        ("penalties.logit_bias_values: must be in [-100, 100]", {"messages": USER}, "logit_bias"),
        ("penalties.repetition_penalty: must be in (0, 10]", {"messages": USER}, "repetition_penalty"),
        ("top_logprobs: must be in [0, 20], got 21", {"messages": USER}, "top_logprobs"),
        ("top_logprobs: must be in [0, 20], got 21", {"prompt": "x"}, "logprobs"),
        ("constraint.json_schema: unknown type", {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
         "response_format.json_schema.schema"),
        ("constraint.regex: look-around is not supported", {"prompt": "x", "structured_outputs": {"regex": "(?=a)"}},
         "structured_outputs.regex"),
    ],
)
def test_drafter_names_of_output_fields_become_the_clients(details: str, body: dict, param: str) -> None:
    t = chat_request(ChatCompletionRequest.model_validate(body), 16) if "messages" in body else \
        completion_request(CompletionRequest.model_validate(body), 16)
    error = from_rpc_error(rpc_error(grpc.StatusCode.INVALID_ARGUMENT, details), t.prompt_field, t.max_tokens_field, t.rules.renames)
    assert (error.status, error.param) == (400, param) and error.message.startswith(f"{param}: ")


def test_a_constraint_too_expensive_to_compile_is_a_400() -> None:
    t = completion_request(CompletionRequest.model_validate({"prompt": "x", "structured_outputs": {"grammar": "start: x"}}), 16)
    details = "constraint.grammar: too expensive to compile"
    error = from_rpc_error(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, details), "prompt", "max_tokens", t.rules.renames)
    assert (error.status, error.param) == (400, "structured_outputs.grammar")


@pytest.mark.parametrize(
    "details, param",
    [
        ("sampling.temperature: must be >= 0, got -1.0", "temperature"),
        ("sampling.top_p: must be in (0, 1], got 2.0", "top_p"),
        ("max_new_tokens: must be > 0, got 0", "max_completion_tokens"),
        ("chat.messages: must not be empty", "messages"),
        ("chat.messages[2].role: must not be empty", "messages[2].role"),
        ("text: the prompt must not be empty", "prompt"),
        ("speculation.num_draft_tokens: must be in [0, 8]", "speculation.num_draft_tokens"),
        ("acceptance.parameter: lenient needs a lenience in (0, 1], got 2", "speculation.acceptance"),
        ("upstream: something the verifier said", None),
    ],
)
def test_drafter_field_names_become_the_clients(details: str, param: str | None) -> None:
    prompt_field = "prompt" if details.startswith("text") else "messages"
    error = from_rpc_error(rpc_error(grpc.StatusCode.INVALID_ARGUMENT, details), prompt_field, "max_completion_tokens")
    assert (error.status, error.param, error.type) == (400, param, "invalid_request_error")
    if param:
        assert error.message.startswith(f"{param}: ")


@pytest.mark.parametrize(
    "code, status, retry_after",
    [
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429, "3"),
        (grpc.StatusCode.UNAVAILABLE, 503, "1"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 504, None),
        (grpc.StatusCode.UNAUTHENTICATED, 401, None),
        (grpc.StatusCode.INTERNAL, 500, None),
    ],
)
def test_statuses_map_to_http(code: grpc.StatusCode, status: int, retry_after: str | None) -> None:
    trailing = (("retry-after-ms", "2500"),) if code == grpc.StatusCode.RESOURCE_EXHAUSTED else ()
    error = from_rpc_error(rpc_error(code, "secret internal detail", trailing))
    assert error.status == status and error.headers.get("Retry-After") == retry_after
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}
    if status == 500:
        assert "secret" not in error.message


def test_pydantic_errors_name_the_field_as_written() -> None:
    assert field_path(("body", "messages", 0, "content", "list[ContentPart]", 1, "type")) == "messages[0].content[1].type"
    assert field_path(("body", "stop", "str")) == "stop"
    assert field_path(("body",)) is None
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate({"messages": USER, "temperature": "hot"})
    error = validation_failure([{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()])
    assert (error.status, error.param) == (400, "temperature")
    error = validation_failure([{"type": "json_invalid", "loc": ("body", 3), "msg": "JSON decode error", "ctx": {"error": "Expecting value"}}])
    assert error.status == 400 and "not valid JSON" in error.message


@pytest.mark.parametrize("ours, theirs", [("eos", "stop"), ("stop", "stop"), ("length", "length"), ("context_length", "length")])
def test_finish_reasons(ours: str, theirs: str) -> None:
    assert finish_reason(ours) == theirs


def test_openai_field_of_unknown_names_is_none() -> None:
    assert openai_field("request", "messages", "max_tokens") is None
