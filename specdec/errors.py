"""Exceptions that servers map to gRPC status codes (see specdec.grpc_server).

Raise these for anything a caller did or can fix; everything else is an internal error
and reaches the client as INTERNAL without a traceback.
"""

from __future__ import annotations

import grpc


class SpecdecError(Exception):
    """Base class: carries the gRPC status code and a message that names the field."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class InvalidArgument(SpecdecError):
    """The request itself is wrong (a bad value, a malformed round)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(SpecdecError):
    """The request is well formed but not valid in the current state."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(SpecdecError):
    """A limit was reached (sessions, memory); retrying later may succeed. retry_after_ms, when
    set, reaches the client as the trailing metadata `retry-after-ms`."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, field: str, message: str, retry_after_ms: int | None = None) -> None:
        super().__init__(field, message)
        self.retry_after_ms = retry_after_ms


class Unavailable(SpecdecError):
    """The server is not ready, draining, or a backend could not be reached."""

    code = grpc.StatusCode.UNAVAILABLE
