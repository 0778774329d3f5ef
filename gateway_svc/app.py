"""The gateway's HTTP API (FastAPI): OpenAI's endpoints in front of the drafters.

POST /v1/chat/completions and /v1/completions (JSON or SSE), GET /v1/models, GET /health (200
while some drafter is ready, else 503), GET /metrics (Prometheus). With a token, every /v1/
path requires `Authorization: Bearer <token>` (401 otherwise); /health and /metrics stay open,
as the services' health and metrics do. Every error is OpenAI's error JSON (gateway_svc.errors).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway_svc import translate
from gateway_svc.drafter_pool import DrafterPool, NoDrafterReady
from gateway_svc.errors import OpenAIError
from gateway_svc.generation import Generation
from gateway_svc.metrics import GatewayMetrics
from gateway_svc.schema import ChatCompletionRequest, CompletionRequest, GenerationFields
from gateway_svc.token_bytes import TokenBytes, TokenBytesLoader
from specdec.auth import BearerTokenInterceptor, authorization_metadata

log = logging.getLogger(__name__)
UNION_TAGS = {"str", "int", "float", "bool", "dict", "none"}


def create_app(
    pool: DrafterPool, metrics: GatewayMetrics, *, token: bytes | None = None, served_model_name: str = "",
    timeout: float | None = None, token_bytes: TokenBytesLoader | None = None,
) -> FastAPI:
    """The ASGI app; it follows `pool`'s discovery while it runs (FastAPI's lifespan).
    token_bytes: the drafters' tokenizer, for logprobs' token texts (None: logprobs refused)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool.start()
        yield
        await pool.close()

    app = FastAPI(title="specdec OpenAI-compatible gateway", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    metadata = authorization_metadata(token) if token else None

    def served_models() -> list[str]:
        return [served_model_name] if served_model_name else pool.model_names()

    async def generate(body: GenerationFields, request: Request, chat: bool, to_request: Callable) -> Response:
        try:
            placement = pool.acquire()
        except NoDrafterReady as error:
            raise no_drafter(str(error)) from None
        try:
            names = served_models()
            model = body.model if body.model is not None else names[0]
            if model not in names:
                raise OpenAIError(404, f"The model `{model}` does not exist (served: {', '.join(names)}).",
                                  param="model", code="model_not_found")
            translated = to_request(body, placement.info.max_new_tokens_cap)
            tokens = await load_token_bytes() if translated.rules.logprobs else None
        except BaseException:
            pool.release(placement)
            raise
        generation = Generation(pool, placement, metrics, model, chat, translated, timeout, metadata, tokens)
        return await generation.respond(request)

    async def load_token_bytes() -> TokenBytes:
        if token_bytes is None:
            raise OpenAIError(400, "logprobs: this gateway has no tokenizer to name tokens with", param="logprobs")
        try:
            return await token_bytes.get()
        except (OSError, ValueError) as error:
            log.error("logprobs need the tokenizer of --model %r: %s", token_bytes.model, error)
            raise OpenAIError(500, f"the gateway cannot load its tokenizer (--model {token_bytes.model!r}; see its log)",
                              type="server_error") from None

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await generate(body, request, True, translate.chat_request)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await generate(body, request, False, translate.completion_request)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return translate.models(served_models(), int(time.time()))

    @app.get("/health", response_model=None)
    async def health() -> Response:
        ready = len(pool.ready())
        if ready:
            return JSONResponse({"status": "ok", "drafters_ready": ready})
        return no_drafter(f"no drafter is ready ({pool.describe()})").response()

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(OpenAIError)
    async def openai_error(request: Request, error: OpenAIError) -> Response:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        return validation_failure(error.errors()).response()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        code = "not_found" if error.status_code == 404 else None
        return OpenAIError(error.status_code, f"{request.method} {request.url.path}: {error.detail}", code=code).response()

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> Response:
        log.exception("internal error", exc_info=error)
        return OpenAIError(500, "internal error (see the gateway's log)", type="server_error").response()

    app.add_middleware(BearerTokenMiddleware, token=token)
    app.add_middleware(HttpMetricsMiddleware, metrics=metrics)
    return app


def no_drafter(message: str) -> OpenAIError:
    return OpenAIError(503, message, type="server_error", code="unavailable", headers={"Retry-After": "1"})


def validation_failure(errors: Any) -> OpenAIError:
    """400 for the first of pydantic's errors, naming the field as the client wrote it."""
    first = dict(errors[0]) if errors else {"loc": ("body",), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return OpenAIError(400, f"the request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}")
    param = field_path(first.get("loc", ()))
    if param is None:
        what = "missing" if first.get("type") == "missing" else f"not a JSON object: {first['msg']}"
        return OpenAIError(400, f"the request body is {what}")
    return OpenAIError(400, f"{param}: {first['msg']}", param=param)


def field_path(loc: Any) -> str | None:
    """`messages[0].role` for pydantic's ("body", "messages", 0, "role"); union member tags
    ("str", "list[int]") are dropped."""
    path = ""
    for part in list(loc)[1:]:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier() and part not in UNION_TAGS:
            path += f".{part}" if path else part
    return path or None


class BearerTokenMiddleware:
    """401 for a /v1/ request without the token (specdec.auth's constant-time check)."""

    def __init__(self, app: ASGIApp, token: bytes | None) -> None:
        self.app = app
        self.check = BearerTokenInterceptor(token) if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.check is None or scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        if self.check.admits((("authorization", header),)):
            return await self.app(scope, receive, send)
        error = OpenAIError(401, "a valid bearer token is required (header `Authorization: Bearer <token>`)", code="invalid_api_key")
        await error.response()(scope, receive, send)


class HttpMetricsMiddleware:
    """Counts every HTTP request by endpoint, method and status, with its time to the last byte."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.observe_http(scope["path"], scope["method"], status, time.perf_counter() - started)
