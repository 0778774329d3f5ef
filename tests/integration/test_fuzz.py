"""Validation fuzzing of the running services (the shared cluster: real processes, real model).

Hypothesis drives random GenerateRequest and VerifyRequest messages, and raw bytes that are mostly
not protobuf at all (random, or valid messages mutated byte by byte), at Drafter.Generate and
Verifier.Verify over loopback, 1,000 cases per RPC (SPECDEC_FUZZ_CASES for more; fixed seed:
derandomized, no example database, no deadline). Every case must end with a status or a
complete stream within its timeout: never INTERNAL or UNKNOWN (an unhandled server error), never
DEADLINE_EXCEEDED (a hang), and valid input never refused as garbage. Meanwhile a greedy
session runs again and again and must produce the reference tokens every time. The seed corpus
tests/fuzz_corpus/ (the nastiest inputs, listed in its build_corpus.py) is replayed first.

Valid cases are kept cheap (at most 2 new tokens, prompts of a few tokens), so most cases are
refused in milliseconds and the module takes about a minute.
"""

from __future__ import annotations

import math
import os
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from specdec.client import Client
from specdec.v1 import common_pb2, drafter_pb2, verifier_pb2

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus"
GENERATE = "/specdec.v1.Drafter/Generate"
VERIFY = "/specdec.v1.Verifier/Verify"
# Derandomized cases per service: the suite runs 1,000 (its time budget); SPECDEC_FUZZ_CASES asks for more.
CASES = int(os.environ.get("SPECDEC_FUZZ_CASES", "1000"))
TIMEOUT = 30.0
# a crash (an unhandled exception) or a hang; everything else is a deliberate answer
FORBIDDEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
HEALTHY = dict(messages=[{"role": "user", "content": "Write a numbered list of ten fruits."}], max_new_tokens=48,
               temperature=0.0, num_draft_tokens=4)
FUZZ = settings(
    max_examples=CASES, derandomize=True, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)


def read_frames(data: bytes) -> list[bytes]:
    """A corpus file of a stream: messages, each after its 4-byte big-endian length."""
    frames, at = [], 0
    while at + 4 <= len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        frames.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    return frames


def _check(call, messages: object) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    """Run one case; the status it ended with (OK for a complete stream)."""
    try:
        for _ in call(messages, timeout=TIMEOUT):
            pass
    except grpc.RpcError as error:
        assert error.code() not in FORBIDDEN, f"{error.code()}: {error.details()}"
        return error.code()
    return grpc.StatusCode.OK


# --- strategies -------------------------------------------------------------------------------

floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
small_ints = st.integers(-3, 40)
int32s = st.integers(-(2**31), 2**31 - 1)
token_ids = st.one_of(st.integers(0, 49151), int32s)
names = st.one_of(st.sampled_from(["", "copy", "ngram", "exact", "lenient", "mentored", "auto", "fixed", "specdec++"]), st.text(max_size=8))


@st.composite
def sampling(draw) -> common_pb2.SamplingParams:  # type: ignore[no-untyped-def]
    msg = common_pb2.SamplingParams(top_k=draw(st.one_of(st.just(0), int32s)))
    if draw(st.booleans()):
        msg.temperature = draw(st.one_of(st.just(0.0), floats))
    if draw(st.booleans()):
        msg.top_p = draw(st.one_of(st.just(1.0), floats))
    if draw(st.booleans()):
        msg.seed = draw(st.integers(0, 2**64 - 1))
    return msg


def acceptance() -> st.SearchStrategy[common_pb2.AcceptanceParams]:
    return st.builds(common_pb2.AcceptanceParams, rule=names, parameter=st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def generate_requests(draw) -> drafter_pb2.GenerateRequest:  # type: ignore[no-untyped-def]
    msg = drafter_pb2.GenerateRequest(
        # valid values only 1 or 2 (cheap); the cluster's cap is 512
        max_new_tokens=draw(st.one_of(st.integers(-2, 2), int32s.filter(lambda n: n <= 0 or n > 512))), sampling=draw(sampling()),
        stop=draw(st.lists(st.text(max_size=6), max_size=3)),
    )
    kind = draw(st.sampled_from(["text", "chat", "token_ids", "none"]))
    if kind == "text":
        msg.text = draw(st.text(max_size=24))
    elif kind == "chat":
        for role, content in draw(st.lists(st.tuples(st.sampled_from(["user", "system", "assistant", ""]), st.text(max_size=12)), max_size=3)):
            msg.chat.messages.add(role=role, content=content)
    elif kind == "token_ids":
        msg.token_ids.ids.extend(draw(st.lists(token_ids, max_size=6)))
    spec = msg.speculation
    spec.drafter = draw(names)
    spec.draft_policy = draw(names)
    for field in ("num_draft_tokens", "max_tree_nodes"):
        if draw(st.booleans()):
            setattr(spec, field, draw(st.one_of(small_ints, int32s)))
    if draw(st.booleans()):
        spec.overlap = draw(st.booleans())
    if draw(st.booleans()):
        msg.acceptance.CopyFrom(draw(acceptance()))
    return msg


@st.composite
def valid_generate_requests(draw) -> drafter_pb2.GenerateRequest:  # type: ignore[no-untyped-def]
    """Requests the drafter must serve: random content within every limit, 1-2 new tokens."""
    msg = drafter_pb2.GenerateRequest(max_new_tokens=draw(st.integers(1, 2)), stop=draw(st.lists(st.text(min_size=1, max_size=4), max_size=2)))
    kind = draw(st.sampled_from(["text", "chat", "token_ids"]))
    if kind == "text":
        msg.text = draw(st.text(min_size=1, max_size=16))
    elif kind == "chat":
        for role, content in draw(st.lists(st.tuples(st.sampled_from(["user", "system", "assistant"]), st.text(max_size=12)), min_size=1, max_size=2)):
            msg.chat.messages.add(role=role, content=content)
    else:
        msg.token_ids.ids.extend(draw(st.lists(st.integers(0, 49151), min_size=1, max_size=6)))
    temperature = draw(st.one_of(st.just(0.0), st.floats(0.05, 2.0)))
    msg.sampling.temperature = temperature
    msg.sampling.top_k = draw(st.integers(0, 100))
    msg.sampling.top_p = draw(st.floats(0.05, 1.0))
    if draw(st.booleans()):
        msg.sampling.seed = draw(st.integers(0, 2**64 - 1))
    spec = msg.speculation
    spec.drafter = draw(st.sampled_from(["", "copy", "ngram"]))
    spec.draft_policy = draw(st.sampled_from(["", "fixed", "auto", "leviathan", "specdec++", "copy-confidence"]))
    if draw(st.booleans()):
        spec.num_draft_tokens = draw(st.integers(0, 8))  # the test verifier's depth limit
        if draw(st.booleans()):
            spec.max_tree_nodes = draw(st.integers(spec.num_draft_tokens, 16))
    if draw(st.booleans()):
        spec.overlap = draw(st.booleans())
    rule = draw(st.sampled_from(["", "exact", "lenient"] + (["mentored"] if temperature > 0 else [])))
    if rule:
        msg.acceptance.rule = rule
        msg.acceptance.parameter = draw(st.floats(0.05, 1.0))
    return msg


@st.composite
def generate_cases(draw) -> tuple[bytes, bool]:  # type: ignore[no-untyped-def]
    """(bytes, must be served): about 1 in 30 a valid request, else anything."""
    if draw(st.integers(0, 29)) == 0:
        return draw(valid_generate_requests()).SerializeToString(), True
    data = draw(st.one_of(generate_requests().map(lambda m: m.SerializeToString()), mutated(generate_requests())))
    return data, False


@st.composite
def verify_requests(draw) -> verifier_pb2.VerifyRequest:  # type: ignore[no-untyped-def]
    kind = draw(st.sampled_from(["open", "round", "round", "close", "empty"]))
    if kind == "open":
        msg = verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(
            prompt_token_ids=draw(st.lists(token_ids, max_size=6)), sampling=draw(sampling()), plain=draw(st.booleans())))
        if draw(st.booleans()):
            msg.open.acceptance.CopyFrom(draw(acceptance()))
        return msg
    if kind == "round":
        msg = verifier_pb2.VerifyRequest(round=verifier_pb2.Round())
        for _ in range(draw(st.integers(0, 4))):
            node = msg.round.nodes.add(parent=draw(st.one_of(st.integers(-2, 4), int32s)), token_id=draw(token_ids))
            if draw(st.booleans()):  # a point mass on its token (valid), else anything
                node.q.token_ids.append(node.token_id)
                node.q.probs.append(1.0)
            else:
                node.q.token_ids.extend(draw(st.lists(token_ids, max_size=3)))
                node.q.probs.extend(draw(st.lists(floats, max_size=3)))
        return msg
    if kind == "close":
        return verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession())
    return verifier_pb2.VerifyRequest()


@st.composite
def valid_open(draw) -> verifier_pb2.VerifyRequest:  # type: ignore[no-untyped-def]
    """An OpenSession the verifier must accept: a short prompt of vocabulary ids, sane sampling."""
    msg = verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=draw(st.lists(st.integers(0, 49151), min_size=1, max_size=6))))
    msg.open.sampling.temperature = draw(st.one_of(st.just(0.0), st.floats(0.05, 2.0)))
    msg.open.sampling.top_k = draw(st.integers(0, 100))
    msg.open.sampling.top_p = draw(st.floats(0.05, 1.0))
    if draw(st.booleans()):
        msg.open.sampling.seed = draw(st.integers(0, 2**64 - 1))
    msg.open.plain = draw(st.booleans())  # then the rounds after it may find a pass run ahead, or drop it
    return msg


@st.composite
def verify_cases(draw) -> list[bytes]:  # type: ignore[no-untyped-def]
    """A stream of 1-4 messages; about 1 in 10 opens a valid session and then sends anything."""
    message = verify_requests()
    frame = st.one_of(message.map(lambda m: m.SerializeToString()), mutated(message))
    if draw(st.integers(0, 9)) == 0:
        return [draw(valid_open()).SerializeToString(), *draw(st.lists(frame, max_size=3))]
    return draw(st.lists(frame, min_size=1, max_size=4))


@st.composite
def mutated(draw, valid: st.SearchStrategy) -> bytes:  # type: ignore[no-untyped-def,type-arg]
    """A valid message's bytes with a few bytes flipped, inserted or cut; or random bytes."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.binary(max_size=48))
    data = bytearray(draw(valid).SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "cut"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        else:
            del data[at : at + draw(st.integers(1, 4))]
    return bytes(data)


# --- the cases ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(cluster) -> list[int]:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        return client.generate(**HEALTHY).token_ids


@pytest.fixture(scope="module")
def healthy(cluster, reference: list[int]) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """A greedy session running alongside all the fuzzing, again and again; each run must be the reference."""
    stop, outputs, errors = threading.Event(), [], []

    def run() -> None:
        with Client(cluster.address) as client:
            while not stop.is_set():
                try:
                    outputs.append(client.generate(**HEALTHY).token_ids)
                except grpc.RpcError as error:  # noqa: PERF203
                    errors.append(f"{error.code()}: {error.details()}")

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    yield
    stop.set()
    runner.join(timeout=120)
    assert not errors, errors
    assert outputs and all(o == reference for o in outputs)


@pytest.fixture(scope="module")
def channels(cluster) -> Iterator[tuple[grpc.Channel, grpc.Channel]]:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(cluster.address) as drafter, grpc.insecure_channel(cluster.verifier.address) as verifier:
        yield drafter, verifier


def test_seed_corpus_replays(channels, healthy) -> None:  # type: ignore[no-untyped-def]
    drafter, verifier = channels
    generate, verify = drafter.unary_stream(GENERATE), verifier.stream_stream(VERIFY)
    files = sorted(CORPUS.glob("generate/*.bin")) + sorted(CORPUS.glob("verify/*.bin"))
    assert len(files) >= 20
    for path in files:
        data = path.read_bytes()
        if path.parent.name == "generate":
            code = _check(generate, data)
        else:
            code = _check(verify, iter(read_frames(data)))
        assert code != grpc.StatusCode.OK or path.stem.startswith("valid"), f"{path.name} was accepted"


def test_generate_fuzz(channels, healthy) -> None:  # type: ignore[no-untyped-def]
    generate = channels[0].unary_stream(GENERATE)
    codes: Counter[str] = Counter()

    @FUZZ
    @given(generate_cases())
    def case(data_and_valid: tuple[bytes, bool]) -> None:
        data, valid = data_and_valid
        code = _check(generate, data)
        codes[code.name] += 1
        assert code == grpc.StatusCode.OK if valid else code in {
            grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION
        }, code

    case()
    print(f"Generate: {dict(codes)}")
    assert sum(codes.values()) == CASES
    assert codes["OK"] >= 20 and codes["INVALID_ARGUMENT"] >= CASES // 2  # valid requests were served too


def test_verify_fuzz(channels, healthy) -> None:  # type: ignore[no-untyped-def]
    verify = channels[1].stream_stream(VERIFY)

    codes: Counter[str] = Counter()

    @FUZZ
    @given(verify_cases())
    def case(frames: list[bytes]) -> None:
        codes[_check(verify, iter(frames)).name] += 1

    case()
    print(f"Verify: {dict(codes)}")
    assert sum(codes.values()) == CASES
    assert codes["OK"] >= 20 and codes["INVALID_ARGUMENT"] >= CASES // 2  # valid sessions were served too


def test_float_strategies_reach_the_edges() -> None:
    """The fuzz draws NaN and infinities (else the validation of floats goes untested)."""
    seen: list[float] = []

    @settings(max_examples=300, derandomize=True, database=None)
    @given(floats)
    def collect(x: float) -> None:
        seen.append(x)

    collect()
    assert any(math.isnan(x) for x in seen) and any(math.isinf(x) for x in seen)
