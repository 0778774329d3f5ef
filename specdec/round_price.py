"""The price of one round, as the verifier publishes it (verifier.proto, RoundPrice).

Units are plain decoding passes (Leviathan et al., 2023, section 3.2: a round of K drafts costs
K c + 1 target passes; here the target pass itself grows with the drafted nodes): a round of
n drafted nodes costs 1 for n = 0, else round_costs[n - 1] where that table reaches (a lone
round on a verifier that pads its passes: a staircase), else 1 + round_overhead + node_cost n;
never below 1.
plain_seconds is the unit's seconds, against which a drafter prices its own steps. The verifier
alone sets a price (verifier_svc/pass_price.py); a drafter only reads it. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.v1 import verifier_pb2


@dataclass(frozen=True)
class RoundPrice:
    """A round's cost in plain decoding passes (module docstring). plain_seconds 0: no price."""

    node_cost: float = 0.0  # c
    round_overhead: float = 0.0  # c0
    plain_seconds: float = 0.0
    round_costs: tuple[float, ...] = ()  # a round of 1, 2, ... nodes, where measured

    @property
    def known(self) -> bool:
        return self.plain_seconds > 0

    def of(self, nodes: int) -> float:
        """What a round of `nodes` drafted nodes costs, in plain decoding passes."""
        if nodes <= 0:
            return 1.0
        if nodes <= len(self.round_costs):
            return max(1.0, self.round_costs[nodes - 1])
        return max(1.0, 1.0 + self.round_overhead + self.node_cost * nodes)

    def with_pending(self, extra_tokens: int) -> RoundPrice:
        """The price of a round whose pass also scores `extra_tokens` more pending tokens (the
        first round's pass reads the prompt): that pass, 1 + c0 + c extra plain passes long, is
        the unit, and a drafted node adds c of the plain pass to it (its overhead is paid; a
        prompt's rows are not padded, so no table)."""
        if extra_tokens <= 0:
            return self
        base = 1.0 + self.round_overhead + self.node_cost * extra_tokens
        return RoundPrice(self.node_cost / base, 0.0, self.plain_seconds * base)

    def to_proto(self) -> verifier_pb2.RoundPrice:
        return verifier_pb2.RoundPrice(
            node_cost=self.node_cost, round_overhead=self.round_overhead, plain_seconds=self.plain_seconds,
            round_costs=self.round_costs,
        )

    @classmethod
    def from_proto(cls, msg: verifier_pb2.RoundPrice) -> RoundPrice:
        """The price a message carries; a malformed one (negative or not finite) is no price."""
        values = (msg.node_cost, msg.round_overhead, msg.plain_seconds, *msg.round_costs)
        if not all(v >= 0 and v != float("inf") for v in values):  # NaN fails v >= 0
            return cls()
        return cls(msg.node_cost, msg.round_overhead, msg.plain_seconds, tuple(msg.round_costs))
