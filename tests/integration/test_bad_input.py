"""Bad input gets a precise status naming the field, and a healthy session running alongside
is unaffected (its tokens equal an undisturbed run's: none lost, none duplicated)."""

from __future__ import annotations

import threading

import grpc
import pytest

from specdec.client import Client
from specdec.penalties import Penalties
from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc

PROMPT = "Write a numbered list of ten fruits."
Code = grpc.StatusCode

DRAFTER_CASES = [
    ("empty prompt", dict(prompt=""), Code.INVALID_ARGUMENT, "text"),
    ("empty token prompt", dict(token_ids=[]), Code.INVALID_ARGUMENT, "token_ids"),
    ("prompt over context", dict(token_ids=[42] * 8192), Code.INVALID_ARGUMENT, "prompt"),
    ("temperature < 0", dict(prompt="hi", temperature=-0.5), Code.INVALID_ARGUMENT, "sampling.temperature"),
    ("top_p = 0", dict(prompt="hi", top_p=0.0), Code.INVALID_ARGUMENT, "sampling.top_p"),
    ("top_p > 1", dict(prompt="hi", top_p=1.5), Code.INVALID_ARGUMENT, "sampling.top_p"),
    ("top_k < 0", dict(prompt="hi", top_k=-1), Code.INVALID_ARGUMENT, "sampling.top_k"),
    ("max_new_tokens = 0", dict(prompt="hi", max_new_tokens=0), Code.INVALID_ARGUMENT, "max_new_tokens"),
    ("max_new_tokens < 0", dict(prompt="hi", max_new_tokens=-3), Code.INVALID_ARGUMENT, "max_new_tokens"),
    ("max_new_tokens over cap", dict(prompt="hi", max_new_tokens=513), Code.INVALID_ARGUMENT, "max_new_tokens"),
    ("unknown drafter", dict(prompt="hi", drafter="medusa"), Code.INVALID_ARGUMENT, "speculation.drafter"),
    ("draft length over limit", dict(prompt="hi", num_draft_tokens=9), Code.INVALID_ARGUMENT, "speculation.num_draft_tokens"),
    ("tree nodes over limit", dict(prompt="hi", num_draft_tokens=4, max_tree_nodes=17), Code.INVALID_ARGUMENT, "speculation.max_tree_nodes"),
    ("tree nodes under length", dict(prompt="hi", num_draft_tokens=4, max_tree_nodes=3), Code.INVALID_ARGUMENT, "speculation.max_tree_nodes"),
    ("token id >= vocab", dict(token_ids=[1, 2, 49152]), Code.INVALID_ARGUMENT, "token_ids.ids"),
    ("negative token id", dict(token_ids=[1, -2]), Code.INVALID_ARGUMENT, "token_ids.ids"),
    ("empty stop string", dict(prompt="hi", stop=[""]), Code.INVALID_ARGUMENT, "stop"),
    ("malformed JSON Schema", dict(prompt="hi", json_schema='{"type": "object"'), Code.INVALID_ARGUMENT, "constraint.json_schema"),
    ("schema of an unknown type", dict(prompt="hi", json_schema='{"type": "objekt"}'), Code.INVALID_ARGUMENT, "constraint.json_schema"),
    ("unsupported regex look-ahead", dict(prompt="hi", regex="a(?=b)"), Code.INVALID_ARGUMENT, "constraint.regex"),
    ("grammar with an undefined rule", dict(prompt="hi", grammar="start: foo"), Code.INVALID_ARGUMENT, "constraint.grammar"),
    ("top_logprobs over 20", dict(prompt="hi", logprobs=True, top_logprobs=21), Code.INVALID_ARGUMENT, "top_logprobs"),
    ("top_logprobs < 0", dict(prompt="hi", logprobs=True, top_logprobs=-1), Code.INVALID_ARGUMENT, "top_logprobs"),
    ("repetition_penalty 0", dict(prompt="hi", penalties=Penalties(repetition_penalty=0.0)), Code.INVALID_ARGUMENT, "penalties.repetition_penalty"),
    ("frequency_penalty over 2", dict(prompt="hi", penalties=Penalties(frequency_penalty=2.5)), Code.INVALID_ARGUMENT, "penalties.frequency_penalty"),
    ("logit_bias id outside vocab", dict(prompt="hi", penalties=Penalties(logit_bias=((49152, 1.0),))), Code.INVALID_ARGUMENT,
     "penalties.logit_bias_token_ids"),
]


def _q(ids: list[int], probs: list[float]) -> common_pb2.SparseDistribution:
    return common_pb2.SparseDistribution(token_ids=ids, probs=probs)


def _open(prompt: list[int] = [1, 2, 3]) -> verifier_pb2.VerifyRequest:  # noqa: B006
    return verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt, sampling=common_pb2.SamplingParams(temperature=0.7)))


def _open_with(**fields) -> verifier_pb2.VerifyRequest:  # type: ignore[no-untyped-def]
    """An opening of a valid prompt with extra OpenSession fields."""
    return verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=[1, 2, 3], **fields))


def _round(*drafts: tuple[int, common_pb2.SparseDistribution], parents: list[int] | None = None) -> verifier_pb2.VerifyRequest:
    """A round of (token, q) nodes: a chain, unless parents are given."""
    tree = list(range(-1, len(drafts) - 1)) if parents is None else parents
    nodes = [verifier_pb2.DraftNode(parent=p, token_id=t, q=q) for (t, q), p in zip(drafts, tree)]
    return verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=nodes))


def _points(*tokens: int, parents: list[int] | None = None) -> verifier_pb2.VerifyRequest:
    return _round(*[(t, _q([t], [1.0])) for t in tokens], parents=parents)


CLOSE = verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession())
VERIFIER_CASES = [
    ("q sums to 0.5", [_open(), _round((5, _q([5, 6], [0.25, 0.25])))], Code.INVALID_ARGUMENT, "round.nodes[0].q.probs"),
    ("q negative", [_open(), _round((5, _q([5, 6], [1.5, -0.5])))], Code.INVALID_ARGUMENT, "round.nodes[0].q.probs"),
    ("q lacks its token", [_open(), _round((5, _q([6], [1.0])))], Code.INVALID_ARGUMENT, "round.nodes[0].q"),
    ("q empty", [_open(), _round((5, _q([], [])))], Code.INVALID_ARGUMENT, "round.nodes[0].q"),
    ("q duplicate ids", [_open(), _round((5, _q([5, 5], [0.5, 0.5])))], Code.INVALID_ARGUMENT, "round.nodes[0].q.token_ids"),
    ("q id outside vocab", [_open(), _round((5, _q([5, 60000], [0.5, 0.5])))], Code.INVALID_ARGUMENT, "round.nodes[0].q.token_ids"),
    ("q of a second sibling", [_open(), _round((5, _q([5], [1.0])), (6, _q([6], [0.5])), parents=[-1, -1])],
     Code.INVALID_ARGUMENT, "round.nodes[1].q.probs"),
    ("draft id outside vocab", [_open(), _points(60000)], Code.INVALID_ARGUMENT, "round.nodes.token_id"),
    ("too many nodes", [_open(), _points(*[5] * 17, parents=[-1] * 17)], Code.INVALID_ARGUMENT, "round.nodes"),
    ("tree too deep", [_open(), _points(*[5] * 9)], Code.INVALID_ARGUMENT, "round.nodes"),
    ("parent out of range", [_open(), _points(5, 6, parents=[-1, 7])], Code.INVALID_ARGUMENT, "round.nodes[1].parent"),
    ("parent below -1", [_open(), _points(5, 6, parents=[-1, -3])], Code.INVALID_ARGUMENT, "round.nodes[1].parent"),
    ("parent after its child", [_open(), _points(5, 6, parents=[1, -1])], Code.INVALID_ARGUMENT, "round.nodes[0].parent"),
    ("node its own parent (a cycle)", [_open(), _points(5, 6, parents=[-1, 1])], Code.INVALID_ARGUMENT, "round.nodes[1].parent"),
    ("parents unset (all 0)", [_open(), _points(5, 6, parents=[0, 0])], Code.INVALID_ARGUMENT, "round.nodes[0].parent"),
    ("prompt id outside vocab", [_open([1, 49152])], Code.INVALID_ARGUMENT, "open.prompt_token_ids"),
    ("empty prompt", [_open([])], Code.INVALID_ARGUMENT, "open.prompt_token_ids"),
    ("round before open", [_round()], Code.FAILED_PRECONDITION, "round"),
    ("round after close", [_open(), _round(), CLOSE, _round()], Code.FAILED_PRECONDITION, "round"),
    ("second open", [_open(), _open()], Code.FAILED_PRECONDITION, "open"),
    ("empty message", [verifier_pb2.VerifyRequest()], Code.INVALID_ARGUMENT, "kind"),
    ("malformed JSON Schema", [_open_with(constraint=common_pb2.OutputConstraint(json_schema="{"))], Code.INVALID_ARGUMENT,
     "open.constraint.json_schema"),
    ("unsupported regex", [_open_with(constraint=common_pb2.OutputConstraint(regex="(?<=a)b"))], Code.INVALID_ARGUMENT,
     "open.constraint.regex"),
    ("grammar too big", [_open_with(constraint=common_pb2.OutputConstraint(regex="(" + "|".join(f"w{i:05d}x" for i in range(20000)) + ")"))],
     Code.RESOURCE_EXHAUSTED, "open.constraint.regex"),
    ("top_logprobs over 20", [_open_with(logprobs=True, top_logprobs=99)], Code.INVALID_ARGUMENT, "open.top_logprobs"),
    ("presence_penalty nan", [_open_with(penalties=common_pb2.Penalties(presence_penalty=float("nan")))], Code.INVALID_ARGUMENT,
     "open.penalties.presence_penalty"),
    ("logit_bias id outside vocab", [_open_with(penalties=common_pb2.Penalties(logit_bias_token_ids=[-1], logit_bias_values=[1.0]))],
     Code.INVALID_ARGUMENT, "open.penalties.logit_bias_token_ids"),
    ("generated tokens past the prompt", [_open_with(generated_tokens=3)], Code.INVALID_ARGUMENT, "open.generated_tokens"),
]


@pytest.fixture(scope="module")
def undisturbed(cluster) -> list[int]:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        return client.generate(messages=[{"role": "user", "content": PROMPT}], max_new_tokens=96, temperature=0.0, num_draft_tokens=4).token_ids


def _healthy_session(address: str, out: list) -> None:
    with Client(address) as client:
        out.append(client.generate(messages=[{"role": "user", "content": PROMPT}], max_new_tokens=96, temperature=0.0, num_draft_tokens=4).token_ids)


def test_bad_requests_get_precise_statuses_while_a_session_runs(cluster, undisturbed) -> None:  # type: ignore[no-untyped-def]
    healthy: list[list[int]] = []
    runner = threading.Thread(target=_healthy_session, args=(cluster.address, healthy))
    runner.start()
    with Client(cluster.address) as client, grpc.insecure_channel(cluster.verifier.address) as channel:
        for name, kwargs, code, field in DRAFTER_CASES:
            with pytest.raises(grpc.RpcError) as caught:
                client.generate(**{"max_new_tokens": 8, **kwargs})
            assert caught.value.code() == code, name
            assert caught.value.details().startswith(field), f"{name}: {caught.value.details()}"
        verifier = verifier_pb2_grpc.VerifierStub(channel)
        for name, messages, code, field in VERIFIER_CASES:
            with pytest.raises(grpc.RpcError) as caught:
                list(verifier.Verify(iter(messages)))
            assert caught.value.code() == code, name
            assert caught.value.details().startswith(field), f"{name}: {caught.value.details()}"
    runner.join(timeout=300)
    assert healthy == [undisturbed]
    with grpc.insecure_channel(cluster.verifier.address) as channel:
        load = verifier_pb2_grpc.VerifierStub(channel).GetModelInfo(verifier_pb2.GetModelInfoRequest())
    assert load.open_sessions == 0  # every refused stream released its session


def test_valid_requests_still_work_after_errors(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        result = client.generate("Hello", max_new_tokens=4, temperature=0.0)
    assert len(result.token_ids) >= 1
