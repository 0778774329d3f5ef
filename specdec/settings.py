"""Typed settings objects read from flags and the environment.

Each field of a settings dataclass becomes a flag (`--max-sessions`) whose default comes from
the environment (`SPECDEC_VERIFIER_MAX_SESSIONS`), else from the dataclass. Helm sets env vars.
A field's metadata holds its `help` and its `group`, one of GROUPS, under which `--help` lists it;
the class's `COMMAND` (a ClassVar) names the command in the usage line.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# The flag groups of `--help`, in the order they are listed, with their one-line descriptions.
GROUPS: dict[str, str] = {
    "server": "where the service listens and how it stops",
    "model": "what it serves",
    "verifiers": "which verifiers it sends rounds to, and how it recovers when one breaks",
    "drafters": "which drafters it sends requests to",
    "drafting": "the speculation of requests that do not choose their own",
    "limits": "what one request, one client or the whole process may use",
    "performance": "threads, CPUs, batching and caches",
    "security": "TLS and authentication",
    "observability": "health checks and metrics",
}


def add_flags(parser: argparse.ArgumentParser, cls: type, env_prefix: str) -> None:
    """Add one flag per dataclass field, listed under the group its `group` metadata names (a
    field with none, or an unknown one, under "other settings"); help comes from its `help`."""
    fields = dataclasses.fields(cls)
    group_of = {f.name: f.metadata.get("group") if f.metadata.get("group") in GROUPS else "other" for f in fields}
    groups = {
        g: parser.add_argument_group(g, GROUPS.get(g))
        for g in [*GROUPS, "other"] if g in group_of.values()
    }
    for field in fields:
        env = f"{env_prefix}{field.name.upper()}"
        default = field.default
        if env in os.environ:
            try:
                default = _parse(field.type, os.environ[env])
            except (ValueError, argparse.ArgumentTypeError) as error:
                parser.error(f"{env}={os.environ[env]!r}: {error}")
        groups[group_of[field.name]].add_argument(
            f"--{field.name.replace('_', '-')}",
            dest=field.name,
            type=_converter(field.type),
            metavar=_METAVARS.get(str(field.type), "VALUE"),
            default=default,
            help=f"{field.metadata.get('help', '')} (env {env}; default {default!r})",
        )


def from_args(cls: type[T], args: argparse.Namespace) -> T:
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def parse(cls: type[T], env_prefix: str, argv: Sequence[str] | None = None) -> T:
    parser = argparse.ArgumentParser(
        prog=getattr(cls, "COMMAND", None), usage="%(prog)s [options]", description=inspect.cleandoc(cls.__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flags(parser, cls, env_prefix)
    return from_args(cls, parser.parse_args(argv))


_METAVARS: dict[str, str] = {"int": "N", "float": "X", "str": "TEXT", "bool": "BOOL"}


def _converter(type_name: Any):  # type: ignore[no-untyped-def]
    return {"int": int, "float": float, "str": str, "bool": _bool}.get(str(type_name), str)


def _parse(type_name: Any, text: str) -> Any:
    return _converter(type_name)(text)


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _bool(text: str) -> bool:
    """true/false, 1/0, yes/no or on/off (any case); anything else is refused, not read as false."""
    word = text.strip().lower()
    if word not in _TRUE | _FALSE:
        raise argparse.ArgumentTypeError(f"not a boolean: {text!r} (use true or false)")
    return word in _TRUE
