"""The drafter's connection to its verifier: one shared channel, and the model info it serves.

A drafter refuses a verifier whose tokenizer differs from its own (FAILED_PRECONDITION).
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from drafter_svc.generation import VerifierInfo
from specdec.errors import FailedPrecondition, Unavailable
from specdec.tokenizer import Tokenizer
from specdec.v1 import verifier_pb2, verifier_pb2_grpc

log = logging.getLogger(__name__)


class VerifierLink:
    def __init__(self, address: str, tokenizer: Tokenizer) -> None:
        self.address = address
        self.tokenizer = tokenizer
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = verifier_pb2_grpc.VerifierStub(self.channel)
        self.model_info: verifier_pb2.ModelInfo | None = None
        self.mismatch: str | None = None

    async def connect(self, retry_seconds: float = 0.5) -> None:
        """Wait until the verifier serves, then check that its tokenizer is ours."""
        while True:
            try:
                info = await self.stub.GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=10)
                break
            except grpc.aio.AioRpcError as error:
                log.info("waiting for verifier %s: %s", self.address, error.code().name)
                await asyncio.sleep(retry_seconds)
        if info.tokenizer_fingerprint != self.tokenizer.fingerprint:
            self.mismatch = (
                f"the verifier at {self.address} serves {info.model_name} whose tokenizer "
                f"(fingerprint {info.tokenizer_fingerprint[:12]}) differs from this drafter's "
                f"({self.tokenizer.fingerprint[:12]}); start the drafter with the verifier's model"
            )
            log.error("%s", self.mismatch)
        self.model_info = info

    def require_ready(self) -> tuple[verifier_pb2.ModelInfo, VerifierInfo]:
        if self.mismatch:
            raise FailedPrecondition("", self.mismatch)
        if self.model_info is None:
            raise Unavailable("", f"the verifier at {self.address} is not ready yet")
        info = self.model_info
        if not info.max_draft_depth:  # a verifier from before token trees: chains of max_draft_tokens
            info.max_draft_depth = info.max_draft_tokens
        return info, VerifierInfo(frozenset(info.eos_token_ids), info.context_length)
