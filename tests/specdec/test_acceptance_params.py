"""acceptance_params: the text form clients write, its validation (field-named errors), the wire."""

from __future__ import annotations

import math

import pytest

from specdec.acceptance_params import AcceptanceParams, acceptance_from_proto, acceptance_to_proto, parse
from specdec.errors import InvalidArgument
from specdec.v1 import common_pb2


@pytest.mark.parametrize(("text", "params"), [
    ("exact", AcceptanceParams("exact", 0.0)),
    ("", AcceptanceParams("exact", 0.0)),
    ("lenient:0.5", AcceptanceParams("lenient", 0.5)),
    (" Mentored : 0.1 ", AcceptanceParams("mentored", 0.1)),
])
def test_parse_and_text_form(text: str, params: AcceptanceParams) -> None:
    assert parse(text) == params
    assert parse(str(params)) == params


def test_parse_refuses_a_parameter_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="lenient:L"):
        parse("lenient:half")


def test_unset_message_is_exact_and_the_wire_round_trips() -> None:
    assert acceptance_from_proto(common_pb2.AcceptanceParams()) == AcceptanceParams()
    for params in (AcceptanceParams("lenient", 0.3), AcceptanceParams("mentored", 0.5)):
        assert acceptance_from_proto(acceptance_to_proto(params)) == params


@pytest.mark.parametrize(("params", "greedy", "field"), [
    (AcceptanceParams("greedy", 1.0), False, "acceptance.rule"),
    (AcceptanceParams("lenient", 0.0), False, "acceptance.parameter"),
    (AcceptanceParams("lenient", 1.5), False, "acceptance.parameter"),
    (AcceptanceParams("lenient", math.nan), False, "acceptance.parameter"),
    (AcceptanceParams("mentored", -0.1), False, "acceptance.parameter"),
    (AcceptanceParams("mentored", math.inf), False, "acceptance.parameter"),
    (AcceptanceParams("mentored", 0.1), True, "acceptance.rule"),  # at temperature 0: refused
])
def test_bad_values_name_their_field(params: AcceptanceParams, greedy: bool, field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        params.validate("acceptance", greedy=greedy)
    assert error.value.field == field


@pytest.mark.parametrize("params", [AcceptanceParams(), AcceptanceParams("lenient", 1.0), AcceptanceParams("lenient", 0.1),
                                    AcceptanceParams("mentored", 0.0), AcceptanceParams("mentored", 3.0)])
def test_good_values_pass(params: AcceptanceParams) -> None:
    params.validate("acceptance", greedy=params.rule != "mentored")
