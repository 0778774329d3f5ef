"""Optional TLS for both servers and for the channels between them, from PEM files.

Contract: every function returns None when its files are all unset (plaintext), raises
ValueError when only part of a pair is given (a certificate without its key), and otherwise
returns gRPC credentials:

- a server with a certificate and key serves TLS; with a client CA as well it requires and
  checks client certificates (mutual TLS);
- a channel with a CA file checks the server against that CA; a client certificate and key
  make it present them (for a server that requires mutual TLS).

Kubernetes' native gRPC probes speak plaintext only, so a TLS server can also answer
`grpc.health.v1` on a separate plaintext port (see specdec.grpc_server, `health_port`).
"""

from __future__ import annotations

from pathlib import Path

import grpc


def _read(path: str) -> bytes | None:
    return Path(path).expanduser().read_bytes() if path else None


def _check_pair(cert_file: str, key_file: str, what: str) -> None:
    if bool(cert_file) != bool(key_file):
        raise ValueError(f"{what}: a certificate file needs its key file and vice versa (got cert={cert_file!r}, key={key_file!r})")


def server_credentials(cert_file: str, key_file: str, client_ca_file: str = "") -> grpc.ServerCredentials | None:
    """TLS for a server; mutual TLS (client certificates required) when client_ca_file is set."""
    _check_pair(cert_file, key_file, "server TLS")
    if not cert_file:
        if client_ca_file:
            raise ValueError("server TLS: a client CA file needs the server's own certificate and key")
        return None
    return grpc.ssl_server_credentials(
        [(_read(key_file), _read(cert_file))],
        root_certificates=_read(client_ca_file),
        require_client_auth=bool(client_ca_file),
    )


def channel_credentials(ca_file: str, cert_file: str = "", key_file: str = "") -> grpc.ChannelCredentials | None:
    """TLS for a channel, checking the server against ca_file; cert/key: the client's own (mTLS)."""
    _check_pair(cert_file, key_file, "channel TLS")
    if not ca_file:
        if cert_file:
            raise ValueError("channel TLS: a client certificate needs a CA file to check the server with")
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file), private_key=_read(key_file), certificate_chain=_read(cert_file)
    )


def channel_options(server_name: str) -> list[tuple[str, str]]:
    """Channel options that check the server's certificate for server_name instead of the
    dialled address (verifier pods are dialled by IP; their certificate names the Service)."""
    return [("grpc.ssl_target_name_override", server_name)] if server_name else []
