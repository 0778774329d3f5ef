"""Penalties and biases on the target's logits, and logprob requests (torch-free settings shared
by the drafter and the verifier; the verifier applies them: verifier_svc/penalties.py).

Definitions: repetition_penalty is transformers' RepetitionPenaltyLogitsProcessor (every token
of the prompt and of the output so far: a positive logit divided by it, a negative one
multiplied); frequency_penalty and presence_penalty are OpenAI's (logit -= frequency * count +
presence * (count > 0), count over the generated tokens only); logit_bias adds to a token's
logit; min_tokens forbids EOS before that many tokens are generated; banned_token_ids are never
generated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdec.errors import InvalidArgument
from specdec.v1 import common_pb2

MAX_TOP_LOGPROBS = 20  # OpenAI's limit
MAX_REPETITION_PENALTY = 10.0
MAX_COUNT_PENALTY = 2.0  # OpenAI's range for frequency and presence penalties: [-2, 2]
MAX_LOGIT_BIAS = 100.0  # OpenAI's range: [-100, 100]


@dataclass(frozen=True)
class Penalties:
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias)
    min_tokens: int = 0
    banned_token_ids: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return self != Penalties()

    def validate(self, field: str, vocab_size: int) -> None:
        """InvalidArgument naming the offending field (`field`.<name>)."""
        if not (math.isfinite(self.repetition_penalty) and 0 < self.repetition_penalty <= MAX_REPETITION_PENALTY):
            raise InvalidArgument(f"{field}.repetition_penalty", f"must be in (0, {MAX_REPETITION_PENALTY:g}], got {self.repetition_penalty}")
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and -MAX_COUNT_PENALTY <= value <= MAX_COUNT_PENALTY):
                raise InvalidArgument(f"{field}.{name}", f"must be in [-{MAX_COUNT_PENALTY:g}, {MAX_COUNT_PENALTY:g}], got {value}")
        seen: set[int] = set()
        for token, bias in self.logit_bias:
            if not 0 <= token < vocab_size:
                raise InvalidArgument(f"{field}.logit_bias_token_ids", f"token id {token} is outside the vocabulary [0, {vocab_size})")
            if token in seen:
                raise InvalidArgument(f"{field}.logit_bias_token_ids", f"token id {token} appears twice")
            seen.add(token)
            if not (math.isfinite(bias) and -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS):
                raise InvalidArgument(f"{field}.logit_bias_values", f"must be in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}], got {bias} for token {token}")
        if self.min_tokens < 0:
            raise InvalidArgument(f"{field}.min_tokens", f"must be >= 0, got {self.min_tokens}")
        bad = next((t for t in self.banned_token_ids if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise InvalidArgument(f"{field}.banned_token_ids", f"token id {bad} is outside the vocabulary [0, {vocab_size})")


def penalties_from_proto(msg: common_pb2.Penalties, field: str) -> Penalties:
    """The message's penalties (unset fields at their neutral values); InvalidArgument when the
    logit bias lists differ in length (the values themselves: Penalties.validate)."""
    if len(msg.logit_bias_token_ids) != len(msg.logit_bias_values):
        raise InvalidArgument(f"{field}.logit_bias_values", "needs one value per entry of logit_bias_token_ids")
    return Penalties(
        repetition_penalty=msg.repetition_penalty if msg.HasField("repetition_penalty") else 1.0,
        frequency_penalty=msg.frequency_penalty,
        presence_penalty=msg.presence_penalty,
        logit_bias=tuple(zip(msg.logit_bias_token_ids, msg.logit_bias_values)),
        min_tokens=msg.min_tokens,
        banned_token_ids=tuple(msg.banned_token_ids),
    )


def penalties_to_proto(penalties: Penalties) -> common_pb2.Penalties:
    msg = common_pb2.Penalties(
        frequency_penalty=penalties.frequency_penalty,
        presence_penalty=penalties.presence_penalty,
        logit_bias_token_ids=[t for t, _ in penalties.logit_bias],
        logit_bias_values=[b for _, b in penalties.logit_bias],
        min_tokens=penalties.min_tokens,
        banned_token_ids=list(penalties.banned_token_ids),
    )
    if penalties.repetition_penalty != 1.0:
        msg.repetition_penalty = penalties.repetition_penalty
    return msg


def validate_top_logprobs(top_logprobs: int, field: str) -> None:
    if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        raise InvalidArgument(field, f"must be in [0, {MAX_TOP_LOGPROBS}], got {top_logprobs}")
