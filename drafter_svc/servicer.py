"""The Drafter gRPC servicer: place the session on a verifier, validate and tokenize the request,
run the round loop against that verifier."""

from __future__ import annotations

import logging
import asyncio
import time
from collections.abc import AsyncIterator

import grpc

from drafter_svc.drafter_models import DrafterModels
from drafter_svc.generation import generate
from drafter_svc.policies.policy_state import PolicyState
from drafter_svc.protocol import Defaults, VerifierLimits, request_from_proto
from drafter_svc.resumable_session import ResumePolicy, ResumingVerifier
from drafter_svc.verifier_pool import VerifierPool
from specdec.errors import SpecdecError, Unavailable
from specdec.metrics import DrafterMetrics
from specdec.v1 import drafter_pb2, drafter_pb2_grpc

log = logging.getLogger(__name__)


class DrafterServicer(drafter_pb2_grpc.DrafterServicer):
    def __init__(
        self,
        pool: VerifierPool,
        defaults: Defaults,
        metrics: DrafterMetrics | None = None,
        policies: PolicyState | None = None,
        models: DrafterModels | None = None,
        resume: ResumePolicy = ResumePolicy(),
    ) -> None:
        self.pool = pool
        self.resume = resume
        self.defaults = defaults
        self.metrics = metrics or DrafterMetrics()
        self.policies = policies or PolicyState()  # learned across this process's sessions
        self.models = models  # where the model drafters are

    async def Generate(
        self, request: drafter_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[drafter_pb2.GenerateResponse]:
        try:
            remaining = context.time_remaining()
            deadline = None if remaining is None else time.monotonic() + remaining
            async for response in self._generate(request, deadline):
                yield response
        except SpecdecError as error:
            self.metrics.errors.labels(error.code.name).inc()
            raise
        except grpc.aio.AioRpcError as error:  # the verifier's status, passed on
            self.metrics.errors.labels(error.code().name).inc()
            raise
        except asyncio.CancelledError:
            self.metrics.errors.labels("CANCELLED").inc()
            raise

    async def GetModelInfo(
        self, request: drafter_pb2.GetDrafterModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> drafter_pb2.DrafterModelInfo:
        ready = sorted((m for m in self.pool.members.values() if m.ready), key=lambda m: m.address)
        if not ready or ready[0].model_info is None:
            raise Unavailable("", "no verifier is ready")
        info = ready[0].model_info
        return drafter_pb2.DrafterModelInfo(
            model_name=info.model_name, context_length=info.context_length, max_new_tokens_cap=self.defaults.max_new_tokens_cap
        )

    async def _generate(self, request: drafter_pb2.GenerateRequest, deadline: float | None) -> AsyncIterator[drafter_pb2.GenerateResponse]:
        # Counted before the request is parsed: a request that arrives while others stream sees them.
        self.policies.open_sessions += 1
        try:
            # the session stays on this verifier unless its stream breaks (resumable_session.py)
            with ResumingVerifier(self.pool, self.resume, deadline) as verifier, self.metrics.open_sessions.track_inprogress():
                placed = verifier.placement
                info = placed.model_info
                limits = VerifierLimits(info.context_length, info.max_draft_tokens, info.max_draft_depth)
                generation = request_from_proto(request, self.pool.tokenizer, limits, self.defaults, self.policies.busy())
                async for response in generate(
                    generation, verifier, self.pool.tokenizer, placed.verifier_info, self.policies, self.models
                ):
                    if response.finish_reason != drafter_pb2.FINISH_REASON_UNSPECIFIED:
                        response.stats.resumes = verifier.resumes
                    self.metrics.observe(response)
                    yield response
        finally:
            self.policies.open_sessions -= 1
        price = self.policies.last_price
        log.debug(
            "last round price: a node %.3f and a drafted round %.3f more plain passes of %.1f ms; predictor weights %s",
            price.node_cost, price.round_overhead, 1000 * price.plain_seconds,
            {f"{name}{'' if greedy else ' (raced)' if race else ' (sampled)'}{' (long prompts)' if partial else ''}":
             [round(float(w), 2) for w in p.weights] for (name, greedy, race, partial), p in self.policies.predictors.items()},
        )
