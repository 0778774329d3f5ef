"""Session lifecycle across the two services: seeds, disconnects, streaming, stop strings."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from specdec.client import Client
from specdec.v1 import verifier_pb2, verifier_pb2_grpc
from tests.conftest import CLUSTER_SESSIONS

POEM = [{"role": "user", "content": "Write a long poem about the mountains and the rivers."}]


def _open_sessions(cluster) -> int:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(cluster.verifier.address) as channel:
        return verifier_pb2_grpc.VerifierStub(channel).GetModelInfo(verifier_pb2.GetModelInfoRequest()).open_sessions


# Repeats that the copy and n-gram drafters draft from, so that sampled drafts are often accepted.
REPEATS = [{"role": "user", "content": "Repeat this line four times: the quick brown fox jumps over the lazy dog."}]


def test_same_seed_same_output_whatever_is_drafted_and_different_seeds_differ(cluster) -> None:  # type: ignore[no-untyped-def]
    """A seeded sampled session emits the exponential race's tokens (specdec/coupled_sampling.py):
    the same for any drafter, draft length, policy, tree or overlap, and without speculation."""
    with Client(cluster.address) as client:
        def run(seed: int, **speculation) -> list[int]:  # type: ignore[no-untyped-def]
            result = client.generate(messages=REPEATS, max_new_tokens=32, temperature=1.0, seed=seed, **speculation)
            accepted.append(result.stats.accepted_tokens)
            return result.token_ids

        accepted: list[int] = []
        first = run(1234, drafter="copy", num_draft_tokens=4)  # the `auto` policy
        assert accepted[-1] > 0, "the drafts must be accepted sometimes for this test to mean anything"
        assert run(1234, drafter="copy", num_draft_tokens=0) == first  # plain decoding
        assert run(1234, drafter="copy", num_draft_tokens=8, max_tree_nodes=12, draft_policy="fixed") == first
        assert run(1234, drafter="ngram", num_draft_tokens=3, draft_policy="specdec++") == first
        assert run(1234, drafter="copy", num_draft_tokens=4, overlap=True) == first
        others = {tuple(run(seed, drafter="copy", num_draft_tokens=4)) for seed in range(5)}
        assert len(others | {tuple(first)}) >= 5, "different seeds should give different samples at temperature 1"
        # A lossy rule samples by speculative sampling: same seed and same rounds, same output.
        lossy = run(1234, drafter="copy", num_draft_tokens=4, draft_policy="fixed", acceptance="lenient:0.5")
        assert run(1234, drafter="copy", num_draft_tokens=4, draft_policy="fixed", acceptance="lenient:0.5") == lossy


@pytest.mark.slow
def test_same_seed_same_output_with_the_onnx_drafters(onnx_quantized_dir, cluster) -> None:  # type: ignore[no-untyped-def]
    """The model drafters join the race (they draw its winners and runners-up): the hybrid under
    `auto`, the ONNX drafter as a fixed tree, and plain decoding emit the same tokens."""
    with Client(cluster.address) as client:
        def run(**speculation) -> list[int]:  # type: ignore[no-untyped-def]
            return client.generate(messages=POEM, max_new_tokens=32, temperature=1.0, seed=99, **speculation).token_ids

        plain = run(num_draft_tokens=0)
        assert run(drafter="hybrid", num_draft_tokens=6) == plain
        assert run(drafter="onnx-quantized", num_draft_tokens=4, max_tree_nodes=8, draft_policy="fixed") == plain


def test_client_disconnect_frees_the_verifier_session(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        stream = client.stream(messages=POEM, max_new_tokens=400, temperature=0.0, num_draft_tokens=4)
        next(stream)
        next(stream)
        assert _open_sessions(cluster) == 1
        stream.close()  # cancels the RPC mid-generation
    _wait_for_no_sessions(cluster)


def test_stream_deltas_concatenate_to_the_text_and_stats_add_up(cluster, tokenizer) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        chunks = list(client.stream(messages=POEM, max_new_tokens=48, temperature=0.0, num_draft_tokens=4))
    assert len(chunks) > 1 and all(c.finish_reason is None for c in chunks[:-1])
    ids = [t for c in chunks for t in c.token_ids]
    assert "".join(c.text for c in chunks) == tokenizer.decode(ids)
    stats = chunks[-1].stats
    assert stats.generated_tokens == len(ids) == 48 and chunks[-1].finish_reason == "length"
    assert stats.rounds == stats.generated_tokens - stats.accepted_tokens
    assert stats.mean_acceptance_length == 1 + stats.accepted_tokens / stats.rounds
    assert 0 < stats.verify_seconds < stats.total_seconds


def test_stop_string_ends_generation_before_it(cluster) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    with Client(cluster.address) as client:
        full = client.generate(messages=messages, max_new_tokens=60, temperature=0.0)
        assert "7" in full.text
        stop = full.text[full.text.index("7"):][:2]
        cut = client.generate(messages=messages, max_new_tokens=60, temperature=0.0, stop=[stop])
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(stop)]


def _wait_for_no_sessions(cluster) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while _open_sessions(cluster) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_sessions(cluster) == 0


def test_client_deadline_is_exceeded_and_the_session_freed(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address, timeout=1.0) as client:
        try:
            client.generate(messages=POEM, max_new_tokens=400, temperature=0.0, num_draft_tokens=0)
            raise AssertionError("400 plain target passes cannot finish within 1 s here")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_for_no_sessions(cluster)


def test_sessions_past_the_limit_are_refused_and_the_open_ones_keep_working(cluster) -> None:  # type: ignore[no-untyped-def]
    """The test cluster's verifier allows CLUSTER_SESSIONS sessions."""
    opening = verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=[1, 2, 3]))
    one_round = verifier_pb2.VerifyRequest(round=verifier_pb2.Round())

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(cluster.verifier.address) as channel:
            stub = verifier_pb2_grpc.VerifierStub(channel)
            streams = [stub.Verify() for _ in range(CLUSTER_SESSIONS)]
            try:
                for stream in streams:
                    await stream.write(opening)
                    await stream.write(one_round)
                    assert (await stream.read()).num_accepted == 0  # a plain step: the session is open
                refused = stub.Verify()
                await refused.write(opening)
                try:
                    await refused.read()
                    raise AssertionError("a session past the limit was admitted")
                except grpc.aio.AioRpcError as error:
                    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert error.details().startswith("open")
                await streams[0].write(one_round)
                assert (await streams[0].read()).next_token_id >= 0  # the open sessions still serve
            finally:
                for stream in streams:
                    stream.cancel()

    asyncio.run(scenario())
    _wait_for_no_sessions(cluster)


def test_verdicts_report_the_verifiers_load(cluster, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Three sessions send a round at once: the target runs one pass at a time, so later rounds
    report the rounds ahead of them (what the draft-length policies shorten drafts for)."""
    prompt = tokenizer.encode("The mountains and the rivers")

    async def rounds_at_once() -> list[verifier_pb2.VerifyResponse]:
        async with grpc.aio.insecure_channel(cluster.verifier.address) as channel:
            stub = verifier_pb2_grpc.VerifierStub(channel)
            calls = [stub.Verify() for _ in range(3)]
            for call in calls:
                await call.write(verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt)))
            for call in calls:
                await call.write(verifier_pb2.VerifyRequest(round=verifier_pb2.Round()))
            verdicts = [await call.read() for call in calls]
            for call in calls:
                await call.done_writing()
            return verdicts

    verdicts = asyncio.run(rounds_at_once())
    queued = sorted(v.queued_rounds for v in verdicts)
    assert queued[0] == 0 and queued[-1] >= 1, queued
    assert all(v.open_sessions == 3 for v in verdicts)
    _wait_for_no_sessions(cluster)
