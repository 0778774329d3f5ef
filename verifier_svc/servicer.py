"""The Verifier gRPC servicer: protobuf in, Session calls, protobuf out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from specdec.acceptance_params import acceptance_from_proto
from specdec.errors import FailedPrecondition, InvalidArgument, SpecdecError, Unavailable
from specdec.grammar import GrammarCompiler
from specdec.grpc_server import PROMPT_CACHE_MESSAGE_BYTES
from specdec.output_constraint import constraint_from_proto
from specdec.penalties import penalties_from_proto
from specdec.round_price import RoundPrice
from specdec.sampling_params import sampling_from_proto
from specdec.tokenizer import Tokenizer
from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc
from verifier_svc.acceptance import RoundVerdict
from verifier_svc.kv_cache import kv_bytes_per_token
from verifier_svc.output_rules import OutputOptions
from verifier_svc.prefix_cache import PrefixCache
from verifier_svc.round_pass import PassRecord, cached_entries
from verifier_svc.scheduler import Scheduler
from verifier_svc.session import Limits, RoundInput, Session, SessionTable
from verifier_svc.target_model import TargetModel


@dataclass(frozen=True)
class Batching:
    """How the scheduler batches rounds and how much KV memory sessions may hold."""

    max_batch_tokens: int = 512
    max_wait_ms: float = 3.0
    max_pass_rows: int = 0  # 0: no limit on a batched pass's rows (batch_planner.kept_nodes)
    max_kv_bytes: int = 0  # 0: no limit
    retry_after_ms: int = 1000
    ahead_passes: bool = True  # a lone plain session's next pass runs before its round arrives (scheduler.py)


def round_from_proto(msg: verifier_pb2.Round) -> RoundInput:
    return RoundInput(
        tokens=[d.token_id for d in msg.nodes],
        parents=[d.parent for d in msg.nodes],
        q_token_ids=[list(d.q.token_ids) for d in msg.nodes],
        q_probs=[list(d.q.probs) for d in msg.nodes],
    )


def output_from_proto(msg: verifier_pb2.OpenSession) -> OutputOptions:
    return OutputOptions(
        constraint=constraint_from_proto(msg.constraint),
        penalties=penalties_from_proto(msg.penalties, "open.penalties"),
        logprobs=msg.logprobs,
        top_logprobs=msg.top_logprobs,
        generated_tokens=msg.generated_tokens,
    )


# Room left in the message of a prompt's keys and values for the rest of it.
MESSAGE_OVERHEAD_BYTES = 2**20


def prompt_cache_response(session: Session) -> verifier_pb2.VerifyResponse:
    """The message after a session's first verdict: its prompt's keys and values (empty where the
    session cannot give them or they would not fit in a message)."""
    response = verifier_pb2.VerifyResponse()
    cache = response.prompt_cache
    entries = session.take_prompt_entries()
    if entries is not None and entries.nbytes <= PROMPT_CACHE_MESSAGE_BYTES - MESSAGE_OVERHEAD_BYTES:
        cache.tokens, cache.num_kv_heads, cache.head_dim, cache.dtype = entries.tokens, entries.heads, entries.head_dim, entries.dtype
        cache.keys.extend(entries.keys)
        cache.values.extend(entries.values)
    else:
        cache.SetInParent()  # present, tokens 0: the drafter reads the prompt itself
    return response


def verdict_to_proto(
    verdict: RoundVerdict, seconds: float, queued_rounds: int = 0, open_sessions: int = 0, price: RoundPrice = RoundPrice()
) -> verifier_pb2.VerifyResponse:
    return verifier_pb2.VerifyResponse(
        queued_rounds=queued_rounds,
        open_sessions=open_sessions,
        price=price.to_proto(),
        num_accepted=verdict.num_accepted,
        next_token_id=verdict.next_token,
        next_is_bonus=verdict.is_bonus,
        acceptance_probs=verdict.acceptance_probs.tolist(),
        verify_seconds=seconds,
        accepted_nodes=verdict.accepted_nodes,
        logprobs=[
            common_pb2.TokenLogprob(token_id=lp.token_id, logprob=lp.logprob, top_token_ids=lp.top_token_ids, top_logprobs=lp.top_logprobs)
            for lp in verdict.logprobs
        ],
    )


class VerifierServicer(verifier_pb2_grpc.VerifierServicer):
    """Serves once `ready` is set; the scheduler's worker thread runs the target passes, each
    over the rounds waiting from all sessions (scheduler.py). `metrics` (optional) is told of
    every pass, verdict and error."""

    def __init__(
        self,
        max_sessions: int,
        max_draft_tokens: int,
        max_draft_depth: int,
        context_length: int,
        batching: Batching = Batching(),
        metrics=None,  # type: ignore[no-untyped-def]  # specdec.metrics.VerifierMetrics
        prefix_cache_tokens: int = 0,
    ) -> None:
        self.sessions = SessionTable(max_sessions, headroom_tokens=max_draft_tokens + 1, retry_after_ms=batching.retry_after_ms)
        self.batching = batching
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self.metrics = metrics
        self.scheduler = Scheduler(
            lambda: self.sessions.open,
            max_batch_tokens=batching.max_batch_tokens,
            max_wait_s=batching.max_wait_ms / 1000,
            max_pass_rows=batching.max_pass_rows,
            on_pass=self._on_pass,
            before_pass=self.sessions.check_round,
            ahead_passes=batching.ahead_passes,
        )
        self.scheduler.start()  # its thread loads the model too (server.py) and runs every pass
        self.max_draft_tokens = max_draft_tokens
        self.max_draft_depth = max_draft_depth
        self.requested_context_length = context_length
        self.rounds_in_flight = 0  # rounds waiting for or in a target pass (the load we report)
        self.target: TargetModel | None = None
        self.compiler: GrammarCompiler | None = None  # compiles constraints for the served tokenizer
        self.info: verifier_pb2.ModelInfo | None = None

    def set_ready(self, target: TargetModel, tokenizer: Tokenizer) -> None:
        context = target.context_length
        if self.requested_context_length:
            context = min(context, self.requested_context_length)
        self.limits = Limits(self.max_draft_tokens, self.max_draft_depth, context_length=context)
        self.info = verifier_pb2.ModelInfo(
            model_name=target.name,
            vocab_size=target.vocab_size,
            tokenizer_fingerprint=tokenizer.fingerprint,
            eos_token_ids=tokenizer.eos_token_ids,
            context_length=context,
            max_draft_tokens=self.max_draft_tokens,
            max_draft_depth=self.max_draft_depth,
            max_sessions=self.sessions.max_sessions,
            engine=target.backend.engine(),
            sends_prompt_cache=True,
        )
        # The price starts from the lone and batched passes timed at start (server.load_target).
        self.scheduler.pass_price.seed(target.pass_seconds, target.pass_context_tokens, target.batched_pass_seconds)
        if self.batching.max_kv_bytes:
            self.sessions.max_kv_tokens = self.batching.max_kv_bytes // kv_bytes_per_token(target.model.config, target.dtype)
        self.compiler = GrammarCompiler(tokenizer.to_json(), tokenizer.eos_token_ids, target.vocab_size)
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)
        self.target = target

    def _on_pass(self, record: PassRecord) -> None:
        if self.metrics:
            self.metrics.observe_pass(record)

    def _require_ready(self) -> TargetModel:
        if self.target is None:
            raise Unavailable("", "the verifier is still loading its model")
        return self.target

    async def GetModelInfo(self, request, context) -> verifier_pb2.ModelInfo:  # type: ignore[no-untyped-def]
        self._require_ready()
        info = verifier_pb2.ModelInfo()
        info.CopyFrom(self.info)
        info.open_sessions = self.sessions.open
        # A new session's first round alone in its pass (a prompt's prefill mostly runs alone);
        # a drafter prices a session that shares passes by the latest verdict it got.
        price = self.scheduler.price(self.scheduler.pass_price.seed_context, 1)
        info.price.CopyFrom(price.to_proto())
        return info

    async def Verify(
        self, request_iterator: AsyncIterator[verifier_pb2.VerifyRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[verifier_pb2.VerifyResponse]:
        try:
            async for response in self._verify(request_iterator):
                yield response
        except SpecdecError as error:
            if self.metrics:
                self.metrics.errors.labels(error.code.name).inc()
            raise
        except asyncio.CancelledError:
            if self.metrics:
                self.metrics.errors.labels("CANCELLED").inc()
            raise

    async def _verify(self, request_iterator: AsyncIterator[verifier_pb2.VerifyRequest]) -> AsyncIterator[verifier_pb2.VerifyResponse]:
        target = self._require_ready()
        session: Session | None = None
        reserved = False
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("kind")
                if kind == "open":
                    if reserved:
                        raise FailedPrecondition("open", "this stream already has a session")
                    self.sessions.reserve(len(request.open.prompt_token_ids))
                    reserved = True
                    sampling, seed = sampling_from_proto(request.open.sampling)
                    acceptance = acceptance_from_proto(request.open.acceptance)
                    session = Session(
                        target, list(request.open.prompt_token_ids), sampling, seed, self.limits, acceptance, self.prefix_cache,
                        output_from_proto(request.open), self.compiler, self.eos_token_ids, request.open.plain,
                        request.open.return_prompt_cache,
                    )
                    self.sessions.add(session)
                elif kind == "round":
                    if session is None:
                        raise FailedPrecondition("round", "no session: the stream's first message must be `open`")
                    if session.closed:  # checked here too: a closed session has no cache to queue a round on
                        raise FailedPrecondition("round", "the session has ended")
                    started = time.perf_counter()
                    queued = self.rounds_in_flight
                    self.rounds_in_flight += 1
                    try:
                        verdict, record = await self.scheduler.verify_round(session, round_from_proto(request.round))
                    finally:
                        self.rounds_in_flight -= 1
                    if self.metrics:
                        self.metrics.observe_verdict(verdict, len(request.round.nodes))
                    price = self.scheduler.price(cached_entries(session), max(record.rounds, self.sessions.open))
                    yield verdict_to_proto(verdict, time.perf_counter() - started, queued, self.sessions.open, price)
                    if session.prompt_cache_tokens:  # after the first verdict, as asked: copied off the event loop
                        response = await asyncio.to_thread(prompt_cache_response, session)
                        if self.metrics:
                            self.metrics.prompt_cache_bytes.inc(response.prompt_cache.ByteSize())
                        yield response
                    # Its next pass may run before the next round arrives (after the prompt's entries are taken).
                    self.scheduler.sent(session)
                elif kind == "close":
                    if session is None:
                        raise FailedPrecondition("close", "no session to close")
                    session.closed = True
                    session.cache = None  # type: ignore[assignment]  # free the memory now
                else:
                    raise InvalidArgument("kind", "a VerifyRequest must set open, round or close")
        finally:
            if session is not None:
                session.closed = True  # a round of this stream still queued is refused, not scored
            if reserved:
                self.sessions.release(session)
