"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with its HTTP status.

A drafter's gRPC status maps to one HTTP status (`from_rpc_error`); the field its message names
(`sampling.temperature: must be >= 0`) is renamed to the request field the client sent
(`temperature`), which becomes `param`; a request's own renames (gateway_svc.output_rules: the
penalties, logprobs and the constraint's field) come first. A constraint too expensive to compile
(RESOURCE_EXHAUSTED naming `constraint.<kind>`) is an invalid field, 400, not a busy server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import grpc
from starlette.responses import JSONResponse

# gRPC status -> (HTTP status, OpenAI error type)
HTTP_STATUS: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "invalid_request_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "invalid_request_error"),
    grpc.StatusCode.NOT_FOUND: (404, "invalid_request_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "server_error"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout_error"),
    grpc.StatusCode.CANCELLED: (499, "server_error"),
}
DEFAULT_RETRY_AFTER_SECONDS = 1
# The drafter's field names (drafter_svc/protocol.py) -> OpenAI's; a prefix maps what is under it.
FIELD_NAMES = {
    "max_new_tokens": "max_tokens",
    "sampling.temperature": "temperature",
    "sampling.top_p": "top_p",
    "sampling.top_k": "top_k",
    "sampling.seed": "seed",
    "stop": "stop",
    "speculation": "speculation",
}


class OpenAIError(Exception):
    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None,
        type: str = "invalid_request_error", headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(param: str | None, message: str) -> OpenAIError:
    """400 naming the field."""
    return OpenAIError(400, f"{param}: {message}" if param else message, param=param)


def openai_field(field: str, prompt_field: str, max_tokens_field: str, renames: Mapping[str, str] | None = None) -> str | None:
    """The request field a client sent for a drafter's field name (None: no single field)."""
    for ours, theirs in (renames or {}).items():
        if field == ours or field.startswith(ours + "."):
            return theirs
    if field in ("text", "chat", "prompt", "token_ids", "token_ids.ids"):
        return prompt_field
    if field.startswith("chat.messages"):
        return "messages" + field.removeprefix("chat.messages")
    if field == "max_new_tokens":
        return max_tokens_field
    if field.split(".")[0] == "acceptance":  # one string in the request: "lenient:0.5"
        return "speculation.acceptance"
    for ours, theirs in FIELD_NAMES.items():
        if field == ours or field.startswith(ours + "."):
            return theirs + field.removeprefix(ours)
    return None


def from_rpc_error(
    error: grpc.aio.AioRpcError, prompt_field: str = "messages", max_tokens_field: str = "max_tokens",
    renames: Mapping[str, str] | None = None,
) -> OpenAIError:
    """The OpenAI error for a drafter's status; the named field renamed as the client sent it."""
    code = error.code()
    status, kind = HTTP_STATUS.get(code, (500, "server_error"))
    details = error.details() or code.name
    param = None
    field, sep, rest = details.partition(": ")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and field.startswith("constraint."):
        status, kind = 400, "invalid_request_error"
    if status == 400 and sep and " " not in field:
        param = openai_field(field, prompt_field, max_tokens_field, renames)
        if param is not None:
            details = f"{param}: {rest}"
    headers = {}
    if status in (429, 503):
        headers["Retry-After"] = str(retry_after_seconds(error.trailing_metadata()))
    if status == 500:  # never pass an internal message on
        details = "internal error in the drafter (see its log)"
    return OpenAIError(status, details, param=param, code=code.name.lower(), type=kind, headers=headers)


def retry_after_seconds(metadata: Any) -> int:
    """Whole seconds from the trailing metadata `retry-after-ms` (rounded up; default 1 s)."""
    for key, value in metadata or ():
        if key == "retry-after-ms":
            try:
                return max(1, math.ceil(int(value) / 1000))
            except ValueError:
                break
    return DEFAULT_RETRY_AFTER_SECONDS
