"""The Drafter gRPC servicer: validate and tokenize the request, run the round loop."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from drafter_svc.draft_policy import PolicyState
from drafter_svc.generation import generate
from drafter_svc.protocol import Defaults, VerifierLimits, request_from_proto
from drafter_svc.verifier_link import VerifierLink
from specdec.v1 import drafter_pb2, drafter_pb2_grpc

log = logging.getLogger(__name__)


class DrafterServicer(drafter_pb2_grpc.DrafterServicer):
    def __init__(self, link: VerifierLink, defaults: Defaults, policies: PolicyState | None = None) -> None:
        self.link = link
        self.defaults = defaults
        self.policies = policies or PolicyState()  # learned across this process's sessions

    async def Generate(
        self, request: drafter_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[drafter_pb2.GenerateResponse]:
        model_info, verifier_info = self.link.require_ready()
        limits = VerifierLimits(model_info.context_length, model_info.max_draft_tokens, model_info.max_draft_depth)
        generation = request_from_proto(request, self.link.tokenizer, limits, self.defaults)
        async for response in generate(generation, self.link.stub, self.link.tokenizer, verifier_info, self.policies):
            yield response
        costs = self.policies.costs
        fixed, per_node = costs.line()
        log.info(
            "pass costs after %d rounds: plain %.1f ms, with n drafts %.1f + %.2f n ms; predictor weights %s",
            costs.observations, 1000 * costs.plain, 1000 * fixed, 1000 * per_node,
            {name: [round(float(w), 2) for w in p.weights] for name, p in self.policies.predictors.items()},
        )
