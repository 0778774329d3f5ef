"""Verifier addresses as HOST:PORT text, IPv6 hosts in brackets."""

from __future__ import annotations


def format_address(host: str, port: int | str) -> str:
    """HOST:PORT, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def split_host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{what}: expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)
