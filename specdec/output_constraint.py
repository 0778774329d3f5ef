"""A constraint on the generated text: a JSON Schema, a regular expression or a Lark/EBNF
grammar (torch-free, numpy-free: the client imports it). Compiled into token masks by
specdec/grammar.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.v1 import common_pb2

CONSTRAINT_KINDS = ("json_schema", "regex", "grammar")


@dataclass(frozen=True)
class OutputConstraint:
    """kind: one of CONSTRAINT_KINDS; text: the schema (JSON), regex or grammar."""

    kind: str
    text: str


def constraint_from_proto(msg: common_pb2.OutputConstraint) -> OutputConstraint | None:
    """The request's constraint, or None when it sets none."""
    kind = msg.WhichOneof("kind")
    return None if kind is None else OutputConstraint(kind, getattr(msg, kind))


def constraint_to_proto(constraint: OutputConstraint | None) -> common_pb2.OutputConstraint:
    msg = common_pb2.OutputConstraint()
    if constraint is not None:
        setattr(msg, constraint.kind, constraint.text)
    return msg
