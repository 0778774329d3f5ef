"""The acceptance rule is chosen per request through the real services: reported in the stats,
lenient:1 and mentored:0 reproduce the exact rule's tokens at the same seed, and bad values get
INVALID_ARGUMENT naming the field, from the drafter and from the verifier, while the servers
keep serving."""

from __future__ import annotations

import grpc
import pytest

from specdec.client import Client
from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc

PROMPT = [{"role": "user", "content": "Repeat after me: the quick brown fox jumps over the lazy dog."}]


def test_rule_is_selected_per_request_and_reported(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        def run(acceptance: str | None, temperature: float = 1.0):  # type: ignore[no-untyped-def]
            return client.generate(messages=PROMPT, max_new_tokens=8, temperature=temperature, seed=3,
                                   num_draft_tokens=4, draft_policy="fixed", acceptance=acceptance)

        assert run(None).stats.acceptance_rule == "exact"  # seeded: the exponential race (test_sessions.py)
        # Speculative sampling's exact rule, bit for bit: the same seed and rounds, the same output.
        lenient, mentored = run("lenient:1"), run("mentored:0")
        assert (lenient.stats.acceptance_rule, mentored.stats.acceptance_rule) == ("lenient:1", "mentored:0")
        assert lenient.token_ids == mentored.token_ids, "lenient:1 and mentored:0 must both be the exact rule at the same seed"
        assert run("mentored:0.5").stats.acceptance_rule == "mentored:0.5"
        assert run("lenient:0.5", temperature=0.0).stats.acceptance_rule == "lenient:0.5"


DRAFTER_CASES = [
    ("lenient:0", 1.0, "acceptance.parameter"),
    ("lenient:1.5", 1.0, "acceptance.parameter"),
    ("mentored:-1", 1.0, "acceptance.parameter"),
    ("mentored:nan", 1.0, "acceptance.parameter"),
    ("bogus:1", 1.0, "acceptance.rule"),
    ("mentored:0.1", 0.0, "acceptance.rule"),  # temperature 0: refused
]


def test_bad_values_get_invalid_argument(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        for acceptance, temperature, field in DRAFTER_CASES:
            with pytest.raises(grpc.RpcError) as caught:
                client.generate("hi", max_new_tokens=4, temperature=temperature, acceptance=acceptance)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, acceptance
            assert caught.value.details().startswith(field), f"{acceptance}: {caught.value.details()}"
    with grpc.insecure_channel(cluster.verifier.address) as channel:
        verifier = verifier_pb2_grpc.VerifierStub(channel)
        for rule, parameter, field in [("lenient", 2.0, "open.acceptance.parameter"), ("nope", 0.0, "open.acceptance.rule")]:
            opening = verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(
                prompt_token_ids=[1, 2, 3], sampling=common_pb2.SamplingParams(temperature=0.7),
                acceptance=common_pb2.AcceptanceParams(rule=rule, parameter=parameter)))
            with pytest.raises(grpc.RpcError) as caught:
                list(verifier.Verify(iter([opening])))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details().startswith(field), caught.value.details()
    with Client(cluster.address) as client:  # still serving
        assert client.generate("Hello", max_new_tokens=2, temperature=0.0).token_ids
