"""The Verifier servicer in-process on the real model, over loopback gRPC: concurrent sessions
are batched by the scheduler and still commit the target's greedy tokens; sessions past the
session limit or the KV memory limit get RESOURCE_EXHAUSTED with a retry hint while the admitted
ones finish; the /metrics endpoint's series match what the clients received."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest
import torch

from specdec.grpc_server import ExceptionToStatusInterceptor
from specdec.launcher import free_port
from specdec.metrics import VerifierMetrics, scrape_metrics, serve_metrics
from specdec.round_price import RoundPrice
from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc
from verifier_svc.backends.pass_timing import time_lone_passes
from verifier_svc.kv_cache import kv_bytes_per_token
from verifier_svc.servicer import Batching, VerifierServicer
from verifier_svc.target_model import TargetModel

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Count with me: one, two, three, four, five, six, seven,",
    "Roses are red, violets are blue, sugar is sweet, and so",
    "def square(x):\n    return x * x\n\ndef cube(x):\n   ",
    "The capital of France is Paris. The capital of Italy is",
]
NEW_TOKENS = 12
MAX_DRAFT = 4


@pytest.fixture(scope="module")
def target(reference_model) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(reference_model, "reference")


@pytest.fixture(scope="module")
def references(target: TargetModel, tokenizer) -> list[tuple[list[int], list[int]]]:  # type: ignore[no-untyped-def]
    """(prompt ids, the target's greedy continuation of NEW_TOKENS tokens) per prompt."""
    out = []
    for text in PROMPTS:
        ids = tokenizer.encode(text)
        with torch.inference_mode():
            full = target.model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
        out.append((ids, full[0, len(ids) :].tolist()))
    return out


def serving(target: TargetModel, tokenizer, max_sessions: int, max_kv_bytes: int = 0):  # type: ignore[no-untyped-def]
    """(servicer, metrics, metrics port); the caller starts the grpc server in its loop."""
    holder: list[VerifierServicer] = []
    metrics = VerifierMetrics(lambda: holder[0].sessions.open, max_sessions, lambda: 1.0)
    servicer = VerifierServicer(max_sessions, MAX_DRAFT, MAX_DRAFT, 2048, Batching(max_wait_ms=20, max_kv_bytes=max_kv_bytes, retry_after_ms=250), metrics)
    holder.append(servicer)
    servicer.set_ready(target, tokenizer)
    port = free_port()
    serve_metrics(metrics.registry, "127.0.0.1", port)
    return servicer, metrics, port


async def start(servicer: VerifierServicer) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=[ExceptionToStatusInterceptor()])
    verifier_pb2_grpc.add_VerifierServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def generate(stub, prompt: list[int], reference: list[int], wrong_at: int, log: dict) -> list[int]:  # type: ignore[no-untyped-def]
    """A greedy session drafting from the reference (its 3rd draft wrong every `wrong_at`
    rounds) until NEW_TOKENS tokens are committed; counts what the client received in `log`."""
    stream = stub.Verify()
    greedy = common_pb2.SamplingParams(temperature=0.0)
    await stream.write(verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt, sampling=greedy)))
    out: list[int] = []
    rounds = 0
    while len(out) < NEW_TOKENS:
        drafts = reference[len(out) : len(out) + 3]
        if rounds % wrong_at == 1 and len(drafts) == 3:
            drafts[2] = (drafts[2] + 1) % 1000
        nodes = [verifier_pb2.DraftNode(token_id=t, parent=i - 1, q=common_pb2.SparseDistribution(token_ids=[t], probs=[1.0])) for i, t in enumerate(drafts)]
        await stream.write(verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=nodes)))
        response = await stream.read()
        out += [drafts[i] for i in response.accepted_nodes] + [response.next_token_id]
        rounds += 1
        log["rounds"] += 1
        log["drafted"] += len(drafts)
        log["accepted"] += response.num_accepted
        for position in range(response.num_accepted):
            log["per_pos"][position] = log["per_pos"].get(position, 0) + 1
    await stream.done_writing()
    return out[:NEW_TOKENS]


async def refused_open(stub, prompt: list[int]) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    stream = stub.Verify()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stream.write(verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt)))
        await stream.write(verifier_pb2.VerifyRequest(round=verifier_pb2.Round()))
        await stream.read()
    return caught.value


def test_sessions_past_the_limit_are_refused_admitted_ones_batched_and_exact_and_metrics_match(target, tokenizer, references) -> None:  # type: ignore[no-untyped-def]
    """3 sessions allowed, 5 tried: 2 get RESOURCE_EXHAUSTED (retry-after-ms trailer), the 3
    run concurrently (some passes hold several rounds) and commit exactly the target's greedy
    tokens; the count returns to 0; /metrics equals the clients' own tallies."""
    servicer, metrics, metrics_port = serving(target, tokenizer, max_sessions=3)
    log = {"rounds": 0, "drafted": 0, "accepted": 0, "per_pos": {}}

    async def scenario() -> tuple[list[list[int]], list[grpc.aio.AioRpcError]]:
        server, address = await start(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = verifier_pb2_grpc.VerifierStub(channel)
                runs = [asyncio.create_task(generate(stub, p, r, 2 + k, log)) for k, (p, r) in enumerate(references[:3])]
                while servicer.sessions.open < 3:
                    await asyncio.sleep(0.01)
                errors = [await refused_open(stub, p) for p, _ in references[3:]]
                return await asyncio.gather(*runs), errors
        finally:
            await server.stop(None)
            servicer.scheduler.stop()

    outputs, errors = asyncio.run(scenario())
    assert outputs == [r for _, r in references[:3]]
    for error in errors:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert dict(error.trailing_metadata() or ()).get("retry-after-ms") == "250"
    assert servicer.sessions.open == 0 and servicer.sessions.kv_tokens() == 0
    m = scrape_metrics(metrics_port)
    assert m["specdec_spec_decode_num_drafts_total"] == log["rounds"]
    assert m["specdec_spec_decode_num_draft_tokens_total"] == log["drafted"]
    assert m["specdec_spec_decode_num_accepted_tokens_total"] == log["accepted"] > 0
    for position, count in log["per_pos"].items():
        assert m[f"specdec_spec_decode_num_accepted_tokens_per_pos_total{{position={position}}}"] == count
    assert m["specdec_verifier_errors_total{code=RESOURCE_EXHAUSTED}"] == len(errors)
    assert m["specdec_verifier_batch_size_sum"] == log["rounds"]  # every round in exactly one pass
    assert m["specdec_verifier_batch_size_count"] < log["rounds"]  # some passes held several rounds
    assert m["specdec_verifier_pass_seconds_count"] == m["specdec_verifier_batch_size_count"]
    assert m["specdec_verifier_queue_wait_seconds_count"] == log["rounds"]
    assert m["specdec_verifier_open_sessions"] == 0 and m["specdec_verifier_queue_depth"] == 0


def test_kv_memory_limit_refuses_new_sessions_and_spares_running_ones(target, tokenizer, references) -> None:  # type: ignore[no-untyped-def]
    """KV memory for 3 prompts' worth of tokens: a fourth session's open is refused though the
    session count allows it, and the running sessions all finish exactly."""
    per_token = kv_bytes_per_token(target.model.config, target.dtype)
    assert per_token == 30 * 3 * 64 * 2 * 4  # SmolLM2-135M: 30 layers, 3 KV heads of 64, fp32
    prompts = [p for p, _ in references[:3]]
    budget = sum(len(p) for p in prompts) + 3 * (MAX_DRAFT + 1) + 3 * NEW_TOKENS
    servicer, _, _ = serving(target, tokenizer, max_sessions=8, max_kv_bytes=budget * per_token)
    log = {"rounds": 0, "drafted": 0, "accepted": 0, "per_pos": {}}

    async def scenario() -> tuple[list[list[int]], grpc.aio.AioRpcError]:
        server, address = await start(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = verifier_pb2_grpc.VerifierStub(channel)
                runs = [asyncio.create_task(generate(stub, p, r, 3, log)) for p, r in references[:3]]
                while servicer.sessions.open < 3:
                    await asyncio.sleep(0.01)
                error = await refused_open(stub, references[3][0] * 2)
                return await asyncio.gather(*runs), error
        finally:
            await server.stop(None)
            servicer.scheduler.stop()

    outputs, error = asyncio.run(scenario())
    assert outputs == [r for _, r in references[:3]]
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "KV memory" in error.details()
    assert servicer.sessions.open == 0


def test_model_info_prices_a_first_round_from_the_passes_timed_at_start(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The verifier alone prices rounds: its ModelInfo carries the price of a new session's first
    round, in plain passes of the seconds it timed, and its session counts; no pass costs."""
    tuned = TargetModel(target.model, "tuned")
    tuned.tune_pass_sizes(context_tokens=32, max_tokens=4, repeats=1)
    servicer = VerifierServicer(3, MAX_DRAFT, MAX_DRAFT, 2048)
    untimed = VerifierServicer(1, MAX_DRAFT, MAX_DRAFT, 2048)
    try:
        servicer.set_ready(tuned, tokenizer)
        info = asyncio.run(servicer.GetModelInfo(verifier_pb2.GetModelInfoRequest(), None))
        price = RoundPrice.from_proto(info.price)
        # the fit through the timed passes (noisy on a shared host: a term they would make
        # negative is dropped, so the plain pass is fitted, not copied)
        assert min(tuned.pass_seconds) / 1.5 < price.plain_seconds < 1.5 * max(tuned.pass_seconds)
        assert price.of(1) >= 1.0 and price.node_cost >= 0 and price.round_overhead >= 0
        assert (info.max_sessions, info.open_sessions) == (3, 0)
        # What runs its passes, as tuning left it (this fixture's backend: torch's passes only).
        assert info.engine == tuned.backend.engine(), (info.engine, tuned.backend.engine())
        assert info.engine.startswith("cpu: torch, ") and "; every pass in torch; torch's linear layers " in info.engine
        untimed.set_ready(target, tokenizer)  # never timed (server.load_target times it): no price yet
        assert not asyncio.run(untimed.GetModelInfo(verifier_pb2.GetModelInfoRequest(), None)).price.plain_seconds
    finally:
        servicer.scheduler.stop()
        untimed.scheduler.stop()
    seconds = time_lone_passes(target, max_tokens=3, repeats=1)
    assert len(seconds) == 3 and all(t > 0 for t in seconds)

def test_the_prompts_keys_and_values_follow_the_first_verdict_only_where_asked(target, tokenizer, references) -> None:  # type: ignore[no-untyped-def]
    """A session opened with return_prompt_cache gets one more message after its first verdict:
    nothing but the prompt's entries (float16, one per layer), as the target's forward over the
    prompt computes them; then its rounds go on as before. A session that did not ask gets none."""
    servicer, metrics, _ = serving(target, tokenizer, max_sessions=2)
    prompt, reference = references[0]
    greedy = common_pb2.SamplingParams(temperature=0.0)

    def round_of(drafts: list[int]) -> verifier_pb2.VerifyRequest:
        nodes = [verifier_pb2.DraftNode(token_id=t, parent=i - 1, q=common_pb2.SparseDistribution(token_ids=[t], probs=[1.0])) for i, t in enumerate(drafts)]
        return verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=nodes))

    async def session(ask: bool) -> list[verifier_pb2.VerifyResponse]:
        server, address = await start(servicer)
        try:
            async with grpc.aio.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 * 2**20)]) as channel:
                stream = verifier_pb2_grpc.VerifierStub(channel).Verify()
                await stream.write(verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt, sampling=greedy, return_prompt_cache=ask)))
                await stream.write(round_of(reference[:2]))
                messages = [await stream.read()]
                if ask:
                    messages.append(await stream.read())
                await stream.write(round_of(reference[3:5]))
                messages.append(await stream.read())
                await stream.done_writing()
                assert await stream.read() == grpc.aio.EOF
                return messages
        finally:
            await server.stop(0)

    first, cache, second = asyncio.run(session(ask=True))
    assert first.num_accepted == 2 and first.next_token_id == reference[2] and not first.HasField("prompt_cache")
    assert second.num_accepted == 2 and second.next_token_id == reference[5]
    assert cache.prompt_cache.tokens == len(prompt) and cache.prompt_cache.dtype == "float16"
    rest = verifier_pb2.VerifyResponse()
    rest.CopyFrom(cache)
    rest.ClearField("prompt_cache")
    assert rest.ByteSize() == 0  # nothing but the prompt's entries
    with torch.inference_mode():
        want = target.model(torch.tensor([prompt]), use_cache=True).past_key_values
    shape = (cache.prompt_cache.num_kv_heads, len(prompt), cache.prompt_cache.head_dim)
    for layer, keys, values in zip(want.layers, cache.prompt_cache.keys, cache.prompt_cache.values, strict=True):
        for entries, data in ((layer.keys, keys), (layer.values, values)):
            got = torch.frombuffer(bytearray(data), dtype=torch.float16).view(shape).float()
            torch.testing.assert_close(got, entries[0].float(), atol=2e-3, rtol=2e-3)
    assert metrics.prompt_cache_bytes._value.get() == cache.prompt_cache.ByteSize()
    unasked = asyncio.run(session(ask=False))
    assert len(unasked) == 2 and not any(m.HasField("prompt_cache") for m in unasked)
    assert metrics.prompt_cache_bytes._value.get() == cache.prompt_cache.ByteSize()  # nothing more sent
