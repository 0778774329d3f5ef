"""Shared server plumbing: errors to status codes, health, reflection, graceful shutdown.

Follows grpc's own examples: `grpc.health.v1` reports NOT_SERVING until the service is warm and
again once SIGTERM arrives; then `server.stop(grace)` lets running streams finish. A warm-up that
fails stops the server: a process that cannot serve does not stay up answering probes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from specdec.errors import InvalidArgument, SpecdecError

log = logging.getLogger(__name__)

LISTENING_PREFIX = "SPECDEC_LISTENING"
# A health "service" that is SERVING for as long as the server's event loop answers, warm or
# not, draining or not: what a liveness probe should ask (readiness asks the real services).
LIVENESS_SERVICE = "liveness"


async def _abort(context: grpc.aio.ServicerContext, error: Exception) -> None:
    if isinstance(error, SpecdecError):
        if getattr(error, "retry_after_ms", None):
            context.set_trailing_metadata((("retry-after-ms", str(error.retry_after_ms)),))
        await context.abort(error.code, str(error))
    if isinstance(error, grpc.aio.AioRpcError):  # a backend's status passes through, attributed
        await context.abort(error.code(), f"upstream: {error.details()}")
    log.exception("internal error", exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error (see the server log)")


class ExceptionToStatusInterceptor(grpc.aio.ServerInterceptor):
    """Maps SpecdecError subclasses to their status codes and anything else to INTERNAL,
    without leaking a traceback to the client (KServe's interceptor of the same name).
    Requests are parsed here as well, so bytes that are not the method's message get
    INVALID_ARGUMENT naming `request` (gRPC's own parsing would answer INTERNAL)."""

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        parse = _parser(handler.request_deserializer)
        raw = handler._replace(request_deserializer=None)
        if handler.unary_unary:
            return raw._replace(unary_unary=_wrap_unary(handler.unary_unary, parse))
        if handler.unary_stream:
            return raw._replace(unary_stream=_wrap_stream(handler.unary_stream, parse))
        if handler.stream_stream:
            return raw._replace(stream_stream=_wrap_stream(handler.stream_stream, _parse_each(parse)))
        return handler


def _parser(deserialize: Callable | None) -> Callable:
    def parse(raw):  # type: ignore[no-untyped-def]
        if deserialize is None:
            return raw
        try:
            return deserialize(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and kin
            raise InvalidArgument("request", f"{len(raw)} bytes that do not parse as this method's request message") from None

    return parse


def _parse_each(parse: Callable) -> Callable:
    def parse_stream(requests):  # type: ignore[no-untyped-def]
        async def parsed():  # type: ignore[no-untyped-def]
            async for raw in requests:
                yield parse(raw)

        return parsed()

    return parse_stream


def _wrap_unary(behavior: Callable, parse: Callable) -> Callable:
    @functools.wraps(behavior)
    async def wrapper(request, context):  # type: ignore[no-untyped-def]
        try:
            return await behavior(parse(request), context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as error:  # noqa: BLE001 - this is the one place errors become statuses
            await _abort(context, error)

    return wrapper


def _wrap_stream(behavior: Callable, parse: Callable) -> Callable:
    @functools.wraps(behavior)
    async def wrapper(request, context):  # type: ignore[no-untyped-def]
        try:
            async for response in behavior(parse(request), context):
                yield response
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as error:  # noqa: BLE001
            await _abort(context, error)

    return wrapper


# The largest message a verifier sends and a drafter receives from it: one that carries a prompt's
# keys and values (verifier.proto, PromptCache; ~23 KB a token in float16 for the default model),
# whatever the --max-message-bytes that caps what either receives from its clients.
PROMPT_CACHE_MESSAGE_BYTES = 256 * 2**20


def message_size_options(max_bytes: int, max_send_bytes: int | None = None) -> list[tuple[str, int]]:
    """Server or channel options capping one message received at max_bytes and one sent at
    max_send_bytes (default: max_bytes); larger ones fail with RESOURCE_EXHAUSTED before any
    handler runs."""
    return [("grpc.max_receive_message_length", max_bytes), ("grpc.max_send_message_length", max_send_bytes or max_bytes)]


async def serve(
    *,
    host: str,
    port: int,
    add_services: Callable[[grpc.aio.Server], Sequence[str]],
    warm_up: Callable[[], Awaitable[None]],
    grace_seconds: float,
    options: Sequence[tuple[str, int]] = (),
    credentials: grpc.ServerCredentials | None = None,
    health_port: int = 0,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> None:
    """Run a gRPC server until SIGTERM/SIGINT.

    add_services registers servicers and returns their full names (for health and reflection).
    The bound port is printed as `SPECDEC_LISTENING <port>` so launchers can use port 0.
    credentials: serve TLS (see specdec.tls) instead of plaintext. health_port > 0: also answer
    `grpc.health.v1` (and nothing else) in plaintext on that port, for Kubernetes' gRPC probes,
    which cannot speak TLS; it reports the same statuses as the main port. interceptors run
    before the error mapping, in order (specdec.auth, specdec.client_limits). If warm_up raises,
    the servers stop at once and serve() raises what it raised.
    """
    server = grpc.aio.server(interceptors=[*interceptors, ExceptionToStatusInterceptor()], options=list(options))
    names = list(add_services(server))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    health_server: grpc.aio.Server | None = None
    if health_port:
        health_server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_server)
        health_server.add_insecure_port(f"{host}:{health_port}")
        await health_server.start()
    await server.start()
    print(f"{LISTENING_PREFIX} {bound}", flush=True)
    log.info("listening on %s:%d (%s)%s", host, bound, "TLS" if credentials else "plaintext",
             f", health on {health_port}" if health_port else "")

    async def set_status(status: int) -> None:
        for name in ["", *names]:
            await health_servicer.set(name, status)

    await set_status(health_pb2.HealthCheckResponse.NOT_SERVING)
    await health_servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    warm = asyncio.ensure_future(warm_up())
    await asyncio.wait([warm, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if warm.done() and not stop.is_set():
        if warm.exception() is not None:
            await server.stop(0)
            if health_server is not None:
                await health_server.stop(0)
            raise warm.exception()
        await set_status(health_pb2.HealthCheckResponse.SERVING)
        log.info("serving")
    await stop.wait()
    log.info("draining for up to %.1f s", grace_seconds)
    await set_status(health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.stop(grace_seconds)
    if health_server is not None:
        await health_server.stop(0)
    warm.cancel()
