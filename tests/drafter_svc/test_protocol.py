"""protocol: a request's tree shape, from its own fields or the server's defaults, within the
verifier's limits."""

from __future__ import annotations

import pytest

from drafter_svc.protocol import Defaults, VerifierLimits, request_from_proto
from specdec.client import build_request
from specdec.errors import InvalidArgument

LIMITS = VerifierLimits(context_length=8192, max_draft_tokens=32, max_draft_depth=16)
CHAIN_DEFAULTS = Defaults("copy", num_draft_tokens=8, max_tree_nodes=8, max_new_tokens_cap=512)
TREE_DEFAULTS = Defaults("copy", num_draft_tokens=4, max_tree_nodes=12, max_new_tokens_cap=512)


def shape(tokenizer, defaults: Defaults = TREE_DEFAULTS, limits: VerifierLimits = LIMITS, **speculation) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    request = request_from_proto(build_request(token_ids=[1, 2, 3], **speculation), tokenizer, limits, defaults)
    return request.num_draft_tokens, request.max_tree_nodes


@pytest.mark.parametrize(
    ("speculation", "expected"),
    [
        ({}, (4, 12)),  # the server's default shape
        ({"num_draft_tokens": 8}, (8, 24)),  # a longer draft keeps the default's share of branches
        ({"num_draft_tokens": 16}, (16, 32)),  # ... within the verifier's node limit
        ({"num_draft_tokens": 0}, (0, 0)),  # no speculation
        ({"num_draft_tokens": 2, "max_tree_nodes": 2}, (2, 2)),  # an explicit chain
        ({"max_tree_nodes": 20}, (4, 20)),
    ],
)
def test_tree_shape_from_request_or_defaults(tokenizer, speculation: dict[str, int], expected: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert shape(tokenizer, **speculation) == expected


def test_chain_defaults_give_chains(tokenizer) -> None:  # type: ignore[no-untyped-def]
    assert shape(tokenizer, CHAIN_DEFAULTS) == (8, 8)
    assert shape(tokenizer, CHAIN_DEFAULTS, num_draft_tokens=3) == (3, 3)


def test_default_draft_length_is_cut_to_the_verifiers_depth(tokenizer) -> None:  # type: ignore[no-untyped-def]
    shallow = VerifierLimits(context_length=8192, max_draft_tokens=6, max_draft_depth=2)
    assert shape(tokenizer, limits=shallow) == (2, 6)


@pytest.mark.parametrize(
    ("speculation", "field"),
    [
        ({"num_draft_tokens": 17}, "speculation.num_draft_tokens"),
        ({"num_draft_tokens": -1}, "speculation.num_draft_tokens"),
        ({"num_draft_tokens": 4, "max_tree_nodes": 3}, "speculation.max_tree_nodes"),
        ({"max_tree_nodes": 33}, "speculation.max_tree_nodes"),
    ],
)
def test_shapes_beyond_the_limits_are_refused(tokenizer, speculation: dict[str, int], field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as error:
        shape(tokenizer, **speculation)
    assert error.value.field == field


def test_acceptance_rule_reaches_the_verifier_and_bad_ones_are_refused(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from drafter_svc.protocol import open_message
    from specdec.acceptance_params import AcceptanceParams

    request = request_from_proto(build_request(token_ids=[1, 2, 3], acceptance="mentored:0.1"), tokenizer, LIMITS, TREE_DEFAULTS)
    assert request.acceptance == AcceptanceParams("mentored", 0.1)
    assert open_message(request).open.acceptance.rule == "mentored"
    assert request_from_proto(build_request(token_ids=[1]), tokenizer, LIMITS, TREE_DEFAULTS).acceptance == AcceptanceParams()
    with pytest.raises(InvalidArgument) as error:  # mentored at temperature 0
        request_from_proto(build_request(token_ids=[1], temperature=0.0, acceptance="mentored:0.1"), tokenizer, LIMITS, TREE_DEFAULTS)
    assert error.value.field == "acceptance.rule"


def test_draft_policy_and_overlap_from_request_or_defaults(tokenizer) -> None:  # type: ignore[no-untyped-def]
    def policy(**speculation) -> tuple[str, bool]:  # type: ignore[no-untyped-def]
        request = request_from_proto(build_request(token_ids=[1, 2, 3], **speculation), tokenizer, LIMITS, TREE_DEFAULTS)
        return request.draft_policy, request.overlap

    assert policy() == ("auto", False)  # the server's defaults
    assert policy(draft_policy="specdec++", overlap=True) == ("specdec++", True)
    overlapping = Defaults("copy", 4, 12, 512, draft_policy="leviathan", overlap="on")
    request = request_from_proto(build_request(token_ids=[1], overlap=False), tokenizer, LIMITS, overlapping)
    assert (request.draft_policy, request.overlap) == ("leviathan", False)  # an explicit False wins


def test_overlap_greedy_means_at_temperature_0_only(tokenizer) -> None:  # type: ignore[no-untyped-def]
    greedy_only = Defaults("copy", 4, 12, 512, overlap="greedy")

    def overlap(**fields) -> bool:  # type: ignore[no-untyped-def]
        return request_from_proto(build_request(token_ids=[1], **fields), tokenizer, LIMITS, greedy_only).overlap

    assert overlap(temperature=0.0) is True
    assert overlap(temperature=1.0) is False
    assert overlap(temperature=0.0, overlap=False) is False  # the request's own choice wins
    assert overlap(temperature=0.7, overlap=True) is True
    with pytest.raises(ValueError, match="overlap"):
        Defaults("copy", 4, 12, 512, overlap="sometimes")


def test_model_drafters_get_their_own_default_shape(tokenizer) -> None:  # type: ignore[no-untyped-def]
    defaults = Defaults("copy", 8, 16, 512, model_num_draft_tokens=6, model_max_tree_nodes=6)
    assert shape(tokenizer, defaults) == (8, 16)
    assert shape(tokenizer, defaults, drafter="ngram") == (8, 16)
    assert shape(tokenizer, defaults, drafter="onnx-quantized") == (6, 6)
    assert shape(tokenizer, defaults, drafter="onnx-quantized", num_draft_tokens=3) == (3, 3)
    assert Defaults("onnx-quantized", 8, 16, 512).shape("onnx-quantized") == (8, 8)  # a chain


def test_a_busy_process_gives_requests_that_name_no_drafter_its_busy_drafter(tokenizer) -> None:  # type: ignore[no-untyped-def]
    defaults = Defaults("onnx-quantized", 8, 16, 512, busy_drafter="copy")

    def request(busy: bool, **speculation):  # type: ignore[no-untyped-def]
        return request_from_proto(build_request(token_ids=[1, 2, 3], **speculation), tokenizer, LIMITS, defaults, busy)

    assert (request(False).drafter, request(False).num_draft_tokens, request(False).max_tree_nodes) == ("onnx-quantized", 8, 8)
    assert (request(True).drafter, request(True).num_draft_tokens, request(True).max_tree_nodes) == ("copy", 8, 16)
    assert request(True, drafter="onnx-quantized").drafter == "onnx-quantized"  # named: always honoured
    assert request_from_proto(build_request(token_ids=[1]), tokenizer, LIMITS, TREE_DEFAULTS, True).drafter == "copy"


def test_unknown_draft_policy_is_refused(tokenizer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as error:
        shape(tokenizer, draft_policy="longest")
    assert error.value.field == "speculation.draft_policy"
    assert "specdec++" in error.value.message
