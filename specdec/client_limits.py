"""Per-client concurrency limit on a server's API: at most `limit` calls in progress per client
address (the peer's IP, all its connections together); one more gets RESOURCE_EXHAUSTED naming
the setting. Health and reflection calls are not counted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import grpc

from specdec.auth import is_open_method


def client_key(peer: str) -> str:
    """The client's address without its port ("ipv4:10.0.0.7:53122" -> "ipv4:10.0.0.7")."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0]
    return peer


class ClientStreamLimit(grpc.aio.ServerInterceptor):
    def __init__(self, limit: int, setting: str = "max_streams_per_client") -> None:
        self.limit = limit  # 0: no limit
        self.setting = setting
        self.active: Counter[str] = Counter()

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = await continuation(handler_call_details)
        if handler is None or not self.limit or is_open_method(handler_call_details.method):
            return handler
        if handler.unary_stream:
            return handler._replace(unary_stream=self._limit_stream(handler.unary_stream))
        if handler.unary_unary:
            return handler._replace(unary_unary=self._limit_unary(handler.unary_unary))
        return handler

    async def _admit(self, context: grpc.aio.ServicerContext) -> str:
        key = client_key(context.peer())
        if self.active[key] >= self.limit:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.setting}: this client already has {self.active[key]} calls in progress, this server's limit; retry when one ends",
            )
        self.active[key] += 1
        return key

    def _release(self, key: str) -> None:
        self.active[key] -= 1
        if self.active[key] <= 0:
            del self.active[key]

    def _limit_stream(self, behavior: Callable) -> Callable:
        async def limited(request, context):  # type: ignore[no-untyped-def]
            key = await self._admit(context)
            try:
                async for response in behavior(request, context):
                    yield response
            finally:
                self._release(key)

        return limited

    def _limit_unary(self, behavior: Callable) -> Callable:
        async def limited(request, context):  # type: ignore[no-untyped-def]
            key = await self._admit(context)
            try:
                return await behavior(request, context)
            finally:
                self._release(key)

        return limited
