"""The Verifier gRPC servicer: protobuf in, Session calls, protobuf out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import grpc

from specdec.acceptance_params import acceptance_from_proto
from specdec.errors import FailedPrecondition, InvalidArgument, Unavailable
from specdec.sampling_params import sampling_from_proto
from specdec.tokenizer import Tokenizer
from specdec.v1 import verifier_pb2, verifier_pb2_grpc
from verifier_svc.acceptance import RoundVerdict
from verifier_svc.prefix_cache import PrefixCache
from verifier_svc.session import Limits, RoundInput, Session, SessionTable
from verifier_svc.target_model import TargetModel


def round_from_proto(msg: verifier_pb2.Round) -> RoundInput:
    return RoundInput(
        tokens=[d.token_id for d in msg.nodes],
        parents=[d.parent for d in msg.nodes],
        q_token_ids=[list(d.q.token_ids) for d in msg.nodes],
        q_probs=[list(d.q.probs) for d in msg.nodes],
    )


def verdict_to_proto(verdict: RoundVerdict, seconds: float, queued_rounds: int = 0, open_sessions: int = 0) -> verifier_pb2.VerifyResponse:
    return verifier_pb2.VerifyResponse(
        queued_rounds=queued_rounds,
        open_sessions=open_sessions,
        num_accepted=verdict.num_accepted,
        next_token_id=verdict.next_token,
        next_is_bonus=verdict.is_bonus,
        acceptance_probs=verdict.acceptance_probs.tolist(),
        verify_seconds=seconds,
        accepted_nodes=verdict.accepted_nodes,
    )


class VerifierServicer(verifier_pb2_grpc.VerifierServicer):
    """Serves once `ready` is set; target passes run one at a time on a worker thread."""

    def __init__(
        self, max_sessions: int, max_draft_tokens: int, max_draft_depth: int, context_length: int, prefix_cache_tokens: int = 0
    ) -> None:
        self.sessions = SessionTable(max_sessions)
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self.max_draft_tokens = max_draft_tokens
        self.max_draft_depth = max_draft_depth
        self.requested_context_length = context_length
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="target")
        self.rounds_in_flight = 0  # rounds waiting for or in a target pass (the load we report)
        self.target: TargetModel | None = None
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
        )
        self.target = target

    def _require_ready(self) -> TargetModel:
        if self.target is None:
            raise Unavailable("", "the verifier is still loading its model")
        return self.target

    async def GetModelInfo(self, request, context) -> verifier_pb2.ModelInfo:  # type: ignore[no-untyped-def]
        self._require_ready()
        return self.info

    async def GetLoad(self, request, context) -> verifier_pb2.Load:  # type: ignore[no-untyped-def]
        return verifier_pb2.Load(open_sessions=self.sessions.open, max_sessions=self.sessions.max_sessions)

    async def Verify(
        self, request_iterator: AsyncIterator[verifier_pb2.VerifyRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[verifier_pb2.VerifyResponse]:
        target = self._require_ready()
        loop = asyncio.get_running_loop()
        session: Session | None = None
        reserved = False
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("kind")
                if kind == "open":
                    if reserved:
                        raise FailedPrecondition("open", "this stream already has a session")
                    self.sessions.reserve()
                    reserved = True
                    sampling, seed = sampling_from_proto(request.open.sampling)
                    acceptance = acceptance_from_proto(request.open.acceptance)
                    session = Session(target, list(request.open.prompt_token_ids), sampling, seed, self.limits, acceptance, self.prefix_cache)
                elif kind == "round":
                    if session is None:
                        raise FailedPrecondition("round", "no session: the stream's first message must be `open`")
                    started = time.perf_counter()
                    queued = self.rounds_in_flight
                    self.rounds_in_flight += 1
                    try:
                        verdict = await loop.run_in_executor(self.executor, session.verify, round_from_proto(request.round))
                    finally:
                        self.rounds_in_flight -= 1
                    yield verdict_to_proto(verdict, time.perf_counter() - started, queued, self.sessions.open)
                elif kind == "close":
                    if session is None:
                        raise FailedPrecondition("close", "no session to close")
                    session.closed = True
                    session.cache = None  # type: ignore[assignment]  # free the memory now
                else:
                    raise InvalidArgument("kind", "a VerifyRequest must set open, round or close")
        finally:
            if reserved:
                self.sessions.release()
