"""OpenAI requests to specdec's GenerateRequest and specdec's results to OpenAI's response
shapes: pure functions, no I/O.

Finish reasons: the drafter's `eos` and `stop` are OpenAI's "stop"; `length` and
`context_length` are "length". `usage` counts the prompt's tokens (after the chat template) and
the generated ones. The speculation statistics go in the extension field `speculation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway_svc.errors import invalid
from gateway_svc.output_rules import OutputRules, chat_rules, completion_rules
from gateway_svc.schema import ChatCompletionRequest, CompletionRequest, GenerationFields
from specdec.client import GenerationStats, build_request
from specdec.v1 import drafter_pb2

FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context_length": "length"}


@dataclass(frozen=True)
class Translated:
    """A request ready for a drafter, and how to name its fields back to the client."""

    request: drafter_pb2.GenerateRequest
    prompt_field: str  # "messages" or "prompt"
    max_tokens_field: str  # "max_tokens" or "max_completion_tokens"
    stream: bool
    include_usage: bool
    rules: OutputRules = field(default_factory=OutputRules)  # constraint, penalties, logprobs asked


def chat_request(body: ChatCompletionRequest, default_max_tokens: int) -> Translated:
    _refuse_unsupported(body)
    if body.tools:
        raise invalid("tools", "tool calls are not supported by this server")
    if body.tool_choice not in (None, "none", "auto"):
        raise invalid("tool_choice", "tool calls are not supported by this server")
    messages = [{"role": m.role, "content": _content(m.content, i)} for i, m in enumerate(body.messages)]
    if body.max_completion_tokens is not None:
        max_tokens, max_field = body.max_completion_tokens, "max_completion_tokens"
    else:
        max_tokens, max_field = body.max_tokens, "max_tokens"
    return _translate(body, {"messages": messages}, "messages", max_tokens, max_field, default_max_tokens, chat_rules(body))


def completion_request(body: CompletionRequest, default_max_tokens: int) -> Translated:
    _refuse_unsupported(body)
    if body.echo:
        raise invalid("echo", "is not supported by this server")
    if body.best_of not in (None, 1):
        raise invalid("best_of", "only 1 is supported")
    if body.suffix:
        raise invalid("suffix", "is not supported by this server")
    prompt: Any = body.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise invalid("prompt", f"one prompt per request, got {len(prompt)}")
        prompt = prompt[0]
    source = {"prompt": prompt} if isinstance(prompt, str) else {"token_ids": prompt}
    return _translate(body, source, "prompt", body.max_tokens, "max_tokens", default_max_tokens, completion_rules(body))


def _refuse_unsupported(body: GenerationFields) -> None:
    if body.n not in (None, 1):
        raise invalid("n", f"only 1 choice per request is supported, got {body.n}")
    if body.stream_options is not None and not body.stream:
        raise invalid("stream_options", "is only allowed when stream is true")


def _content(content: Any, index: int) -> str:
    """A message's text: a string, or the text parts of a list joined."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise invalid(f"messages[{index}].content[{j}]", f"only text parts are supported, got type {part.type!r}")
        texts.append(part.text)
    return "".join(texts)


def _translate(
    body: GenerationFields, prompt: dict[str, Any], prompt_field: str, max_tokens: int | None, max_tokens_field: str,
    default_max_tokens: int, rules: OutputRules,
) -> Translated:
    stop: Sequence[str] = [body.stop] if isinstance(body.stop, str) else (body.stop or [])
    spec = body.speculation
    try:
        request = build_request(
            **prompt,
            max_new_tokens=default_max_tokens if max_tokens is None else max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=0 if body.top_k in (None, -1) else body.top_k,  # vLLM's -1: off
            seed=None if body.seed is None else body.seed % 2**64,
            stop=stop,
            drafter=(spec and spec.drafter) or "",
            num_draft_tokens=spec and spec.num_draft_tokens,
            max_tree_nodes=spec and spec.max_tree_nodes,
            draft_policy=(spec and spec.draft_policy) or "",
            overlap=spec and spec.overlap,
            acceptance=spec and spec.acceptance,
            **rules.kwargs,
        )
    except ValueError as error:  # the only parse left to the client side: the acceptance rule
        raise invalid("speculation.acceptance", str(error)) from None
    stream = bool(body.stream)
    include_usage = bool(stream and body.stream_options and body.stream_options.include_usage)
    return Translated(request, prompt_field, max_tokens_field, stream, include_usage, rules)


# --- responses --------------------------------------------------------------------------------


def usage(stats: GenerationStats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
    }


def speculation(stats: GenerationStats) -> dict[str, Any]:
    """The extension field: what speculation did for this request (GenerationStats' names)."""
    return {
        "drafter": stats.drafter,
        "num_draft_tokens": stats.num_draft_tokens,
        "draft_policy": stats.draft_policy,
        "acceptance_rule": stats.acceptance_rule,
        "target_passes": stats.rounds,
        "drafted_tokens": stats.drafted_tokens,
        "accepted_tokens": stats.accepted_tokens,
        "acceptance_rate": stats.acceptance_rate,
        "mean_acceptance_length": stats.mean_acceptance_length,
    }


def finish_reason(ours: str) -> str:
    return FINISH_REASONS.get(ours, "stop")


def chat_completion(
    id: str, created: int, model: str, text: str, reason: str, stats: GenerationStats, logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": logprobs,
                "finish_reason": finish_reason(reason),
            }
        ],
        "usage": usage(stats),
        "system_fingerprint": None,
        "speculation": speculation(stats),
    }


def completion(
    id: str, created: int, model: str, text: str, reason: str, stats: GenerationStats, logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason(reason)}],
        "usage": usage(stats),
        "system_fingerprint": None,
        "speculation": speculation(stats),
    }


def chat_chunk(
    id: str, created: int, model: str, delta: dict[str, Any], reason: str | None, include_usage: bool,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One chunk of a streamed chat completion; `usage` is null on all but the usage chunk."""
    chunk: dict[str, Any] = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason and finish_reason(reason)}],
        "system_fingerprint": None,
    }
    if include_usage:
        chunk["usage"] = None
    return chunk


def completion_chunk(
    id: str, created: int, model: str, text: str, reason: str | None, include_usage: bool,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason and finish_reason(reason)}],
        "system_fingerprint": None,
    }
    if include_usage:
        chunk["usage"] = None
    return chunk


def usage_chunk(object: str, id: str, created: int, model: str, stats: GenerationStats) -> dict[str, Any]:
    """The last chunk of a stream with `stream_options.include_usage`: no choices, the usage."""
    return {
        "id": id, "object": object, "created": created, "model": model, "choices": [],
        "usage": usage(stats), "system_fingerprint": None,
    }


def models(names: Sequence[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "specdec"} for n in names]}
