"""Typed settings objects read from flags and the environment.

Each field of a settings dataclass becomes a flag (`--max-sessions`) whose default comes from
the environment (`SPECDEC_VERIFIER_MAX_SESSIONS`), else from the dataclass. Helm sets env vars.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def add_flags(parser: argparse.ArgumentParser, cls: type, env_prefix: str) -> None:
    """Add one flag per dataclass field; help text comes from the field's `help` metadata."""
    for field in dataclasses.fields(cls):
        env = f"{env_prefix}{field.name.upper()}"
        default = field.default
        if env in os.environ:
            default = _parse(field.type, os.environ[env])
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            dest=field.name,
            type=_converter(field.type),
            default=default,
            help=f"{field.metadata.get('help', '')} (env {env}; default {default!r})",
        )


def from_args(cls: type[T], args: argparse.Namespace) -> T:
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def parse(cls: type[T], env_prefix: str, argv: Sequence[str] | None = None) -> T:
    parser = argparse.ArgumentParser()
    add_flags(parser, cls, env_prefix)
    return from_args(cls, parser.parse_args(argv))


def _converter(type_name: Any):  # type: ignore[no-untyped-def]
    return {"int": int, "float": float, "str": str, "bool": _bool}.get(str(type_name), str)


def _parse(type_name: Any, text: str) -> Any:
    return _converter(type_name)(text)


def _bool(text: str) -> bool:
    return text.strip().lower() in {"1", "true", "yes", "on"}
