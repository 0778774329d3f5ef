"""Gateway settings: flags, else SPECDEC_GATEWAY_* environment variables, else these defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class GatewaySettings:
    """`specdec serve openai`: the OpenAI-compatible HTTP gateway in front of the drafters.

    Each setting is a flag, else a SPECDEC_GATEWAY_* environment variable, else the default."""

    COMMAND: ClassVar[str] = "specdec serve openai"
    host: str = field(default="127.0.0.1", metadata={"group": "server", "help": "address to bind"})
    port: int = field(default=8000, metadata={"group": "server", "help": "HTTP port to bind (0 picks a free one)"})
    drafter: str = field(
        default="127.0.0.1:50051",
        metadata={"group": "drafters", "help": "drafters: HOST:PORT, a comma-separated list, dns:///NAME:PORT or k8s://NAMESPACE/SERVICE[:PORT]"},
    )
    drafter_refresh_seconds: float = field(default=5.0, metadata={"group": "drafters", "help": "how often dns:/// drafter names are resolved again"})
    drafter_poll_seconds: float = field(default=1.0, metadata={"group": "drafters", "help": "how often each drafter's health and model are asked for"})
    drafter_tls_ca_file: str = field(default="", metadata={"group": "security", "help": "PEM CA to check drafters with: TLS to drafters (empty: plaintext)"})
    drafter_tls_cert_file: str = field(default="", metadata={"group": "security", "help": "PEM client certificate shown to drafters (mutual TLS)"})
    drafter_tls_key_file: str = field(default="", metadata={"group": "security", "help": "PEM private key of drafter_tls_cert_file"})
    drafter_tls_server_name: str = field(
        default="", metadata={"group": "security", "help": "name the drafters' certificates must carry (pods are dialled by IP; empty: the address)"}
    )
    served_model_name: str = field(
        default="", metadata={"group": "model", "help": "the model name clients send and /v1/models lists (empty: the name the drafters report)"}
    )
    model: str = field(
        default="default",
        metadata={"group": "model", "help": "the drafters' tokenizer source, as their --model: 'default', a .gguf file or a model folder (names the tokens of logprobs; loaded at the first request asking for them)"},
    )
    request_timeout_seconds: float = field(
        default=600.0, metadata={"group": "limits", "help": "deadline of one generation; past it the client gets 504 (0: none)"}
    )
    tls_cert_file: str = field(default="", metadata={"group": "security", "help": "PEM server certificate: serve HTTPS (empty: plain HTTP)"})
    tls_key_file: str = field(default="", metadata={"group": "security", "help": "PEM private key of tls_cert_file"})
    tls_client_ca_file: str = field(default="", metadata={"group": "security", "help": "PEM CA: require client certificates it signed (mutual TLS)"})
    auth_token_file: str = field(
        default="",
        metadata={"group": "security", "help": "file holding the bearer token clients must send (Authorization: Bearer ...) and the gateway shows the drafters; empty: no check"},
    )
    metrics_port: int = field(
        default=0, metadata={"group": "observability", "help": "also serve Prometheus /metrics over plain HTTP on this port (0: only at /metrics of the main port)"}
    )
    grace_seconds: float = field(default=20.0, metadata={"group": "server", "help": "on SIGTERM, how long running requests may finish"})
    max_message_bytes: int = field(default=4 * 1024 * 1024, metadata={"group": "limits", "help": "largest gRPC message received or sent, in bytes"})
