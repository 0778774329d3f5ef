"""Optional bearer-token check on a server's API (the drafter's client API).

Contract:
- `load_token(path)`: the token is the file's content without surrounding whitespace (a mounted
  Kubernetes Secret); an empty file is an error. The token itself is never a flag or an
  environment variable (those show in `ps` and `--help`) and is never logged.
- `BearerTokenInterceptor(token)`: every call except `grpc.health.v1` and server reflection
  must carry the metadata `authorization: Bearer <token>`. The presented token is compared in
  constant time (hmac.compare_digest over sha256 digests, so not even its length leaks). A call
  without it, or with another token, gets UNAUTHENTICATED with one message for both cases, and
  its request is never parsed.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import grpc

OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/", "/grpc.reflection.v1.ServerReflection/")
REFUSED = "a valid bearer token is required (metadata `authorization: Bearer <token>`)"


def load_token(path: str) -> bytes:
    token = Path(path).expanduser().read_bytes().strip()
    if not token:
        raise ValueError(f"auth_token_file: {path} is empty")
    return token


def authorization_metadata(token: str | bytes) -> tuple[tuple[str, str], ...]:
    """The call metadata a client sends to present `token`."""
    text = token.decode() if isinstance(token, bytes) else token
    return (("authorization", f"Bearer {text.strip()}"),)


def is_open_method(method: str) -> bool:
    return method.startswith(OPEN_METHOD_PREFIXES)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: bytes) -> None:
        self._digest = hashlib.sha256(token).digest()

    def admits(self, metadata: tuple | None) -> bool:
        presented = b""
        for key, value in metadata or ():
            if key == "authorization":
                text = value.decode("latin-1") if isinstance(value, bytes) else value
                scheme, _, credential = text.partition(" ")
                if scheme.lower() == "bearer":
                    presented = credential.strip().encode("utf-8", "surrogateescape")
        return hmac.compare_digest(hashlib.sha256(presented).digest(), self._digest) and bool(presented)

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = await continuation(handler_call_details)
        if handler is None or is_open_method(handler_call_details.method):
            return handler
        if self.admits(handler_call_details.invocation_metadata):
            return handler
        return _refusing(handler)


async def _refuse(request, context):  # type: ignore[no-untyped-def]
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)


async def _refuse_stream(request, context):  # type: ignore[no-untyped-def]
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)
    yield  # pragma: no cover - abort raises; this makes the function a response stream


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """The same kind of handler, answering UNAUTHENTICATED without parsing the request."""
    fields = dict(request_deserializer=None, unary_unary=None, unary_stream=None, stream_unary=None, stream_stream=None)
    kind = ("stream_" if handler.request_streaming else "unary_") + ("stream" if handler.response_streaming else "unary")
    fields[kind] = _refuse_stream if handler.response_streaming else _refuse
    return handler._replace(**fields)
