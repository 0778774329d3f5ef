"""The official `openai` package against `specdec serve openai` in front of real services.

Chat and completions, streamed and not, with seeds: the streamed text is the non-streamed text;
usage counts the chat template's prompt tokens and the generated ones; at temperature 0 the
text is `specdec.Client`'s for the same request. Bad requests get OpenAI's error JSON with the
right status, naming the field, while a stream runs beside them unaffected; a client that goes
away mid-stream frees the verifier's session (its /metrics).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time

import openai
import pytest

from specdec.client import Client
from tests.conftest import verifier_metrics
from tests.gateway.conftest import TOKEN, Gateway

MODEL = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "user", "content": "Write a numbered list of five fruits."}]
PROMPT = "The three largest cities of France are"


def stream_text(stream) -> tuple[str, str | None, object]:  # type: ignore[no-untyped-def]
    """(text, finish reason, usage) of a streamed chat or completion."""
    texts, reason, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        choice = chunk.choices[0]
        texts.append((choice.delta.content or "") if hasattr(choice, "delta") else choice.text)
        reason = choice.finish_reason or reason
    return "".join(texts), reason, usage


def test_models_lists_what_the_drafters_serve(gateway: Gateway) -> None:
    models = gateway.client().models.list()
    assert [m.id for m in models.data] == [MODEL]


@pytest.mark.parametrize("seed", [3, 11])
def test_chat_streamed_equals_non_streamed(gateway: Gateway, seed: int) -> None:
    client = gateway.client()
    args = dict(model=MODEL, messages=MESSAGES, max_tokens=10, temperature=1.0, seed=seed)
    whole = client.chat.completions.create(**args)  # type: ignore[call-overload]
    assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-") and whole.model == MODEL
    assert whole.choices[0].message.role == "assistant" and whole.choices[0].finish_reason in ("stop", "length")
    text, reason, usage = stream_text(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert text == whole.choices[0].message.content and reason == whole.choices[0].finish_reason
    assert usage == whole.usage


def test_completion_streamed_equals_non_streamed(gateway: Gateway) -> None:
    client = gateway.client()
    args = dict(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0.8, seed=5)
    whole = client.completions.create(**args)  # type: ignore[call-overload]
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    text, reason, usage = stream_text(client.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert (text, reason, usage) == (whole.choices[0].text, whole.choices[0].finish_reason, whole.usage)


def test_greedy_output_and_usage_are_the_clients(gateway: Gateway, tokenizer) -> None:  # type: ignore[no-untyped-def]
    client = gateway.client()
    chat = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=12, temperature=0)
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                           extra_body={"speculation": {"num_draft_tokens": 0}})
    with Client(gateway.cluster.address) as reference:
        ours_chat = reference.generate(messages=MESSAGES, max_new_tokens=12, temperature=0)
        ours_completion = reference.generate(PROMPT, max_new_tokens=8, temperature=0)
    assert chat.choices[0].message.content == ours_chat.text
    assert completion.choices[0].text == ours_completion.text
    assert chat.usage.prompt_tokens == len(tokenizer.encode_chat(MESSAGES))
    assert chat.usage.completion_tokens == len(ours_chat.token_ids)
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    assert completion.usage.prompt_tokens == len(tokenizer.encode(PROMPT))
    assert completion.usage.completion_tokens == len(ours_completion.token_ids) == 8
    assert completion.choices[0].finish_reason == "length"
    spec = completion.model_extra["speculation"]
    assert spec["num_draft_tokens"] == 0 and spec["target_passes"] == 8  # speculation off: one pass a token
    spec = chat.model_extra["speculation"]
    assert spec["target_passes"] <= chat.usage.completion_tokens and spec["mean_acceptance_length"] >= 1


def test_stop_string_ends_with_stop(gateway: Gateway) -> None:
    with Client(gateway.cluster.address) as reference:
        text = reference.generate(messages=MESSAGES, max_new_tokens=16, temperature=0).text
    stop = text[len(text) // 2 :][:3]
    chat = gateway.client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stop=[stop])
    assert chat.choices[0].finish_reason == "stop" and chat.choices[0].message.content == text[: text.index(stop)]


BAD = [
    ("/v1/chat/completions", {"model": MODEL}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "temperature": -1}, 400, "temperature"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "top_p": 2}, 400, "top_p"),
    ("/v1/chat/completions", {"model": "gpt-4o", "messages": MESSAGES}, 404, "model"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "n": 5}, 400, "n"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "max_completion_tokens": 100000}, 400, "max_completion_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "", "content": "x"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "speculation": {"drafter": "nope"}}, 400, "speculation.drafter"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "speculation": {"depth": 3}}, 400, "speculation.depth"),
    ("/v1/completions", {"model": MODEL, "prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": PROMPT, "stop": [""]}, 400, "stop"),
    ("/v1/completions", {"model": MODEL, "prompt": PROMPT, "top_k": -5}, 400, "top_k"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "frequency_penalty": 3}, 400, "frequency_penalty"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "presence_penalty": -2.5}, 400, "presence_penalty"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "logit_bias": {"42": 101}}, 400, "logit_bias"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "logit_bias": {"99999999": 1}}, 400, "logit_bias"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "logit_bias": {"x": 1}}, 400, "logit_bias"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "top_logprobs": 2}, 400, "top_logprobs"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "repetition_penalty": 0}, 400, "repetition_penalty"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "min_tokens": -1}, 400, "min_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "response_format": {"type": "xml"}}, 400, "response_format.type"),
    ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}}},
     400, "response_format.json_schema.schema"),
    ("/v1/completions", {"model": MODEL, "prompt": PROMPT, "logprobs": 6}, 400, "logprobs"),
    ("/v1/completions", {"model": MODEL, "prompt": PROMPT, "structured_outputs": {"regex": "(?=a)b"}}, 400, "structured_outputs.regex"),
    ("/v1/completions", {"model": MODEL, "prompt": PROMPT, "structured_outputs": {"grammar": "start: nope"}}, 400,
     "structured_outputs.grammar"),
    ("/v1/completions", {"model": MODEL, "prompt": PROMPT, "structured_outputs": {"choice": ["a"]}}, 400, "structured_outputs.choice"),
]


def test_bad_requests_get_openai_errors_and_a_stream_beside_them_is_unaffected(gateway: Gateway) -> None:
    client = gateway.client()
    args = dict(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.0, seed=21)
    reference = client.chat.completions.create(**args).choices[0].message.content  # type: ignore[call-overload]
    streamed: list[str] = []
    stream = threading.Thread(target=lambda: streamed.append(stream_text(client.chat.completions.create(**args, stream=True))[0]))
    stream.start()
    for path, payload, status, param in BAD:
        got, headers, body = gateway.post(path, payload)
        assert got == status, (payload, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        assert body["error"]["param"] == param, (payload, body)
        assert param in body["error"]["message"], body
    got, _, raw = gateway.http("POST", "/v1/chat/completions", b"{not json", TOKEN)
    assert got == 400 and "not valid JSON" in json.loads(raw)["error"]["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]
    stream.join(600)
    assert streamed == [reference]


def test_a_missing_or_wrong_token_gets_401(gateway: Gateway) -> None:
    for token in (None, "wrong"):
        status, _, body = gateway.http("GET", "/v1/models", token=token)
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        gateway.client(api_key="wrong").chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    assert gateway.http("GET", "/health")[0] == 200  # health and metrics stay open


def open_sessions(gateway: Gateway) -> float:
    return verifier_metrics(gateway.cluster)["specdec_verifier_open_sessions"]


def test_a_client_that_disconnects_mid_stream_frees_the_verifier_session(gateway: Gateway) -> None:
    port = int(gateway.base_url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Count from 1 to 1000, one number a line."}],
            "max_tokens": 500, "temperature": 0, "stream": True}
    connection.request("POST", "/v1/chat/completions", json.dumps(body),
                       {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    response = connection.getresponse()
    assert response.status == 200
    content = 0
    while content < 3:  # a few generated deltas: the session is open on the verifier
        line = response.readline()
        content += line.startswith(b"data: ") and b'"content":"' in line and b'"content":""' not in line
    assert open_sessions(gateway) == 1
    connection.sock.close()  # type: ignore[union-attr]  # the client goes away mid-stream
    connection.close()
    deadline = time.monotonic() + 10
    while open_sessions(gateway) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_sessions(gateway) == 0
    metrics = gateway.http("GET", "/metrics")[2].decode()
    assert re.search(r'^vllm:num_requests_running\{model_name="%s"\} 0\.0$' % MODEL, metrics, re.M)


def test_metrics_use_vllm_names(gateway: Gateway) -> None:
    stream_text(gateway.client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0, stream=True))
    status, headers, body = gateway.http("GET", "/metrics")
    text = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for name in ("vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:generation_tokens_total"):
        assert re.search(r'^%s\{model_name="%s"\} [1-9]' % (name, MODEL), text, re.M), name
    assert re.search(r'^http_requests_total\{handler="/v1/chat/completions",method="POST",status="200"\} [1-9]', text, re.M)
