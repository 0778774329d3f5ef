"""The request fields of constraints, logprobs and penalties: client to proto and back, and the
checks that name the field."""

from __future__ import annotations

import math

import pytest

from specdec.client import build_request
from specdec.errors import InvalidArgument
from specdec.output_constraint import OutputConstraint, constraint_from_proto
from specdec.penalties import Penalties, penalties_from_proto, penalties_to_proto, validate_top_logprobs


def test_build_request_carries_the_constraint_logprobs_and_penalties() -> None:
    penalties = Penalties(1.5, 0.5, -0.25, ((7, 2.0), (9, -100.0)), 3, (11,))  # exact in float32
    request = build_request("hi", regex="[a-z]+", logprobs=True, top_logprobs=5, penalties=penalties)
    assert constraint_from_proto(request.constraint) == OutputConstraint("regex", "[a-z]+")
    assert request.logprobs and request.top_logprobs == 5
    assert penalties_from_proto(request.penalties, "penalties") == penalties
    assert constraint_from_proto(build_request("hi").constraint) is None
    assert penalties_from_proto(build_request("hi").penalties, "penalties") == Penalties()
    with pytest.raises(ValueError, match="at most one"):
        build_request("hi", regex="a", grammar="start: \"a\"")


@pytest.mark.parametrize(
    ("penalties", "field"),
    [
        (Penalties(repetition_penalty=0.0), "p.repetition_penalty"),
        (Penalties(repetition_penalty=math.inf), "p.repetition_penalty"),
        (Penalties(frequency_penalty=-2.5), "p.frequency_penalty"),
        (Penalties(presence_penalty=math.nan), "p.presence_penalty"),
        (Penalties(logit_bias=((100, 1.0),)), "p.logit_bias_token_ids"),
        (Penalties(logit_bias=((5, 1.0), (5, 2.0))), "p.logit_bias_token_ids"),
        (Penalties(logit_bias=((5, 101.0),)), "p.logit_bias_values"),
        (Penalties(min_tokens=-1), "p.min_tokens"),
        (Penalties(banned_token_ids=(-1,)), "p.banned_token_ids"),
    ],
)
def test_out_of_range_penalties_name_their_field(penalties: Penalties, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        penalties.validate("p", vocab_size=100)
    assert caught.value.field == field


def test_unpaired_logit_bias_and_top_logprobs_range() -> None:
    msg = penalties_to_proto(Penalties(logit_bias=((5, 1.0),)))
    msg.logit_bias_values.append(2.0)
    with pytest.raises(InvalidArgument, match="one value per entry"):
        penalties_from_proto(msg, "penalties")
    validate_top_logprobs(20, "top_logprobs")
    for bad in (-1, 21):
        with pytest.raises(InvalidArgument) as caught:
            validate_top_logprobs(bad, "top_logprobs")
        assert caught.value.field == "top_logprobs"
