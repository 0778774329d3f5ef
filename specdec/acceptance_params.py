"""Which acceptance rule a request asks for (torch-free; shared by client, drafter, verifier).

`exact` (the default) keeps the target distribution exactly. Opt-in lossy rules trade a bounded
change of it for more accepted tokens (see verifier_svc/lossy_acceptance.py):
`lenient:L` (Leviathan et al., appendix A.5; L in (0, 1]: no token is emitted with more than 1/L
times its target probability; at temperature 0, x is accepted iff p(x) >= L * max p) and
`mentored:D` (mentored decoding; D >= 0: KL(emitted || target) <= D per token; needs
temperature > 0). `lenient:1` and `mentored:0` are the exact rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec.errors import InvalidArgument
from specdec.v1 import common_pb2

RULES: tuple[str, ...] = ("exact", "lenient", "mentored")


@dataclass(frozen=True)
class AcceptanceParams:
    rule: str = "exact"
    parameter: float = 0.0  # lenient: l; mentored: the KL budget D; exact: unused

    def __str__(self) -> str:
        """The canonical text form, as `parse` reads it and GenerationStats.acceptance_rule reports it."""
        return self.rule if self.rule == "exact" else f"{self.rule}:{self.parameter:g}"

    def validate(self, field_prefix: str = "acceptance", greedy: bool = False) -> None:
        """Raise InvalidArgument naming the offending field."""
        if self.rule not in RULES:
            raise InvalidArgument(f"{field_prefix}.rule", f"unknown rule {self.rule!r}; choose one of {', '.join(RULES)}")
        value = self.parameter
        if self.rule == "lenient" and not (math.isfinite(value) and 0.0 < value <= 1.0):
            raise InvalidArgument(f"{field_prefix}.parameter", f"lenient needs a lenience in (0, 1], got {value}")
        if self.rule == "mentored":
            if not (math.isfinite(value) and value >= 0.0):
                raise InvalidArgument(f"{field_prefix}.parameter", f"mentored needs a finite KL budget >= 0, got {value}")
            if greedy:
                raise InvalidArgument(
                    f"{field_prefix}.rule",
                    "mentored needs sampling (temperature > 0): at temperature 0 the target is a point mass and "
                    "any other output is at infinite KL divergence; use lenient for greedy decoding",
                )


def parse(text: str) -> AcceptanceParams:
    """'exact', 'lenient:L' or 'mentored:D' (not validated: the servers do that); ValueError if
    the parameter is not a number."""
    rule, _, value = text.strip().partition(":")
    try:
        return AcceptanceParams(rule.strip().lower() or "exact", float(value) if value.strip() else 0.0)
    except ValueError:
        raise ValueError(f"acceptance {text!r}: expected exact, lenient:L or mentored:D with a number") from None


def acceptance_from_proto(msg: common_pb2.AcceptanceParams) -> AcceptanceParams:
    """Unset or an empty rule means exact."""
    return AcceptanceParams(msg.rule or "exact", msg.parameter)


def acceptance_to_proto(params: AcceptanceParams) -> common_pb2.AcceptanceParams:
    return common_pb2.AcceptanceParams(rule=params.rule, parameter=params.parameter)
