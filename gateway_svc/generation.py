"""One generation through a drafter: its gRPC call, read whole (a JSON body) or streamed as
Server-Sent Events, and always ended: whatever ends the response (the last token, an error, the
client going away) cancels the call, so the drafter and its verifier free the session.

The first response is awaited before the HTTP status is sent, so that a request the drafter
refuses (its checks all run before it streams) gets its own status; an error after that point
goes to the client as an SSE event `{"error": ...}`, as vLLM sends it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway_svc import translate
from gateway_svc.drafter_pool import DrafterPool, Placement
from gateway_svc.errors import OpenAIError, from_rpc_error
from gateway_svc.logprobs import ChatLogprobs, CompletionLogprobs
from gateway_svc.metrics import GatewayMetrics, GenerationTimer
from gateway_svc.token_bytes import TokenBytes
from specdec.client import Chunk, GenerationStats, TokenLogprob, chunk_from_proto


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


class Generation:
    """A request placed on a drafter; `start()` sends it and waits for the first response."""

    def __init__(
        self, pool: DrafterPool, placement: Placement, metrics: GatewayMetrics, model: str, chat: bool,
        translated: translate.Translated, timeout: float | None, metadata: Any, tokens: TokenBytes | None = None,
    ) -> None:
        """tokens: the tokenizer's token bytes, needed when the request asks for logprobs."""
        self.pool = pool
        self.placement = placement
        self.metrics = metrics
        self.model = model
        self.chat = chat
        self.translated = translated
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.timer = GenerationTimer(metrics, model, time.perf_counter())
        self.call = placement.stub.Generate(translated.request, timeout=timeout, metadata=metadata)
        self.released = False
        self.logprobs: ChatLogprobs | CompletionLogprobs | None = None
        if translated.rules.logprobs:
            assert tokens is not None, "a request with logprobs needs the token bytes"
            self.logprobs = ChatLogprobs(tokens) if chat else CompletionLogprobs(tokens)
        metrics.running.labels(model).inc()

    def end(self) -> None:
        """Cancel the call (a no-op once it has finished) and give the drafter back, once."""
        self.call.cancel()
        if not self.released:
            self.released = True
            self.pool.release(self.placement)
            self.metrics.running.labels(self.model).dec()

    async def next_chunk(self) -> Chunk:
        try:
            msg = await self.call.read()
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                self.pool.report_unavailable(self.placement.address)
            t = self.translated
            raise from_rpc_error(error, t.prompt_field, t.max_tokens_field, t.rules.renames) from None
        if msg is grpc.aio.EOF:
            raise OpenAIError(502, "the drafter ended the stream without a result", type="server_error", code="bad_gateway")
        chunk = chunk_from_proto(msg)
        self.timer.delta_sent(len(chunk.token_ids))
        return chunk

    async def respond(self, request: Request) -> Response:
        """The HTTP response: JSON, or an SSE stream once the first response is in."""
        try:
            first = await self.next_chunk()
        except BaseException:
            self.end()
            raise
        if self.translated.stream:
            return GenerationStream(self.events(first), self.end)
        watch = asyncio.ensure_future(_disconnected(request))
        collect = asyncio.ensure_future(self._collect(first))
        try:
            await asyncio.wait([watch, collect], return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not collect.done():
                collect.cancel()
            self.end()
        if not collect.done() or collect.cancelled():  # the client went away: nobody to answer
            return Response(status_code=499)
        text, reason, stats, logprobs = collect.result()
        build = translate.chat_completion if self.chat else translate.completion
        return JSONResponse(build(self.id, self.created, self.model, text, reason, stats, self._logprobs(logprobs)))

    async def _collect(self, chunk: Chunk) -> tuple[str, str, GenerationStats, list[TokenLogprob]]:
        texts, logprobs = [chunk.text], list(chunk.logprobs)
        while chunk.finish_reason is None:
            chunk = await self.next_chunk()
            texts.append(chunk.text)
            logprobs.extend(chunk.logprobs)
        stats = chunk.stats or GenerationStats()
        self.timer.finished(chunk.finish_reason, stats)
        return "".join(texts), chunk.finish_reason, stats, logprobs

    def _logprobs(self, logprobs: list[TokenLogprob]) -> dict[str, Any] | None:
        return None if self.logprobs is None else self.logprobs.block(logprobs)

    async def events(self, chunk: Chunk) -> AsyncIterator[str]:
        t = self.translated
        if self.chat:
            yield sse(self._chunk({"role": "assistant", "content": ""}, None))
        try:
            while True:
                if chunk.text or (self.logprobs is not None and chunk.logprobs):
                    logprobs = self._logprobs(chunk.logprobs)
                    yield sse(self._chunk({"content": chunk.text} if self.chat else chunk.text, None, logprobs))
                if chunk.finish_reason is not None:
                    stats = chunk.stats or GenerationStats()
                    last = self._chunk({} if self.chat else "", chunk.finish_reason)
                    last["speculation"] = translate.speculation(stats)
                    yield sse(last)
                    if t.include_usage:
                        kind = "chat.completion.chunk" if self.chat else "text_completion"
                        yield sse(translate.usage_chunk(kind, self.id, self.created, self.model, stats))
                    self.timer.finished(chunk.finish_reason, stats)
                    break
                chunk = await self.next_chunk()
        except OpenAIError as error:
            yield sse(error.body())
        yield sse("[DONE]")

    def _chunk(self, delta: Any, reason: str | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        t = self.translated
        if self.chat:
            return translate.chat_chunk(self.id, self.created, self.model, delta, reason, t.include_usage, logprobs)
        return translate.completion_chunk(self.id, self.created, self.model, delta, reason, t.include_usage, logprobs)


class GenerationStream(StreamingResponse):
    """An SSE response that runs `end` however it ends (finished, failed, or disconnected)."""

    def __init__(self, events: AsyncIterator[str], end: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.end = end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.end()
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (its body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
