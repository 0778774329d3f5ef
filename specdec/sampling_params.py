"""Sampling settings shared by the drafter and the verifier (torch-free).

A request's temperature, top-k and top-p define one standardized target distribution
(Leviathan et al., section 2.3: each is just another distribution to sample from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec.errors import InvalidArgument
from specdec.v1 import common_pb2

# Smaller positive temperatures overflow float32 logits to inf (a NaN distribution); found by
# tests/integration/test_fuzz.py. Such a temperature is greedy decoding in all but name.
MIN_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class SamplingParams:
    """How to turn the target's logits into the distribution p we sample from.

    temperature: 0 means greedy (argmax); otherwise logits are divided by it.
    top_k: keep the k most likely tokens; 0 disables.
    top_p: keep the smallest set of most likely tokens whose mass reaches top_p; 1.0 disables.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self, field_prefix: str = "sampling") -> None:
        """Raise InvalidArgument naming the offending field."""
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise InvalidArgument(f"{field_prefix}.temperature", f"must be >= 0, got {self.temperature}")
        if 0 < self.temperature < MIN_TEMPERATURE:  # logits / temperature would overflow to inf
            raise InvalidArgument(f"{field_prefix}.temperature", f"must be 0 (greedy) or >= {MIN_TEMPERATURE}, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidArgument(f"{field_prefix}.top_k", f"must be >= 0 (0 disables), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidArgument(f"{field_prefix}.top_p", f"must be in (0, 1], got {self.top_p}")


def sampling_from_proto(msg: common_pb2.SamplingParams) -> tuple[SamplingParams, int | None]:
    """The settings and the seed (None: unset) of a SamplingParams message, unset fields defaulted."""
    params = SamplingParams(
        temperature=msg.temperature if msg.HasField("temperature") else 1.0,
        top_k=msg.top_k,
        top_p=msg.top_p if msg.HasField("top_p") else 1.0,
    )
    return params, (msg.seed if msg.HasField("seed") else None)


def sampling_to_proto(params: SamplingParams, seed: int | None) -> common_pb2.SamplingParams:
    msg = common_pb2.SamplingParams(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
    if seed is not None:
        msg.seed = seed
    return msg
