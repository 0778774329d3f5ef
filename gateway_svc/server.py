"""`specdec serve openai`: the OpenAI-compatible HTTP gateway in front of the drafters."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
from collections.abc import Sequence

import uvicorn

from drafter_svc.discovery import discovery_from_target
from gateway_svc.app import create_app
from gateway_svc.drafter_pool import DrafterPool
from gateway_svc.metrics import GatewayMetrics
from gateway_svc.settings import GatewaySettings
from gateway_svc.token_bytes import TokenBytesLoader
from specdec import grpc_server, settings, tls
from specdec.auth import authorization_metadata, load_token
from specdec.grpc_server import LISTENING_PREFIX
from specdec.metrics import serve_metrics

ENV_PREFIX = "SPECDEC_GATEWAY_"
log = logging.getLogger(__name__)


def make_pool(config: GatewaySettings, token: bytes | None) -> DrafterPool:
    """The drafter pool the settings describe; a process that cannot build it exits with why."""
    try:
        discovery = discovery_from_target(config.drafter, config.drafter_refresh_seconds)
        credentials = tls.channel_credentials(config.drafter_tls_ca_file, config.drafter_tls_cert_file, config.drafter_tls_key_file)
    except ValueError as error:
        raise SystemExit(f"--drafter {config.drafter!r}: {str(error).removeprefix('verifier: ')}") from None
    return DrafterPool(
        discovery,
        credentials=credentials,
        options=[*tls.channel_options(config.drafter_tls_server_name), *grpc_server.message_size_options(config.max_message_bytes)],
        metadata=authorization_metadata(token) if token else None,
        poll_seconds=config.drafter_poll_seconds,
    )


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as error:
        raise SystemExit(f"--host/--port: cannot bind {host}:{port}: {error.strerror}") from None


async def run(config: GatewaySettings) -> None:
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise SystemExit("--tls-cert-file and --tls-key-file: give both or neither")
    if config.tls_client_ca_file and not config.tls_cert_file:
        raise SystemExit("--tls-client-ca-file: needs --tls-cert-file and --tls-key-file")
    try:
        token = load_token(config.auth_token_file) if config.auth_token_file else None
    except (OSError, ValueError) as error:
        raise SystemExit(f"--auth-token-file: {error}") from None
    pool = make_pool(config, token)
    metrics = GatewayMetrics()
    serve_metrics(metrics.registry, config.host, config.metrics_port)
    app = create_app(
        pool, metrics, token=token, served_model_name=config.served_model_name,
        timeout=config.request_timeout_seconds or None, token_bytes=TokenBytesLoader(config.model),
    )
    sock = bind(config.host, config.port)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            timeout_graceful_shutdown=int(config.grace_seconds),
            ssl_certfile=config.tls_cert_file or None,
            ssl_keyfile=config.tls_key_file or None,
            ssl_ca_certs=config.tls_client_ca_file or None,
            ssl_cert_reqs=ssl.CERT_REQUIRED if config.tls_client_ca_file else ssl.CERT_NONE,
        )
    )
    # uvicorn drains on SIGTERM and then raises the signal again: handled, the process exits 0
    # after the drain, as the services do.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    print(f"{LISTENING_PREFIX} {sock.getsockname()[1]}", flush=True)
    log.info("listening on %s:%d (%s), drafters from %s", config.host, sock.getsockname()[1],
             "HTTPS" if config.tls_cert_file else "HTTP", config.drafter)
    await server.serve(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gateway %(levelname)s %(message)s")
    config = settings.parse(GatewaySettings, ENV_PREFIX, argv)
    asyncio.run(run(config))
