"""What a session's rounds need of a Verify stream: the verifier stub's, or a stream that
re-opens itself on another verifier when it breaks (resumable_session.py). Both fit these."""

from __future__ import annotations

from typing import Any, Protocol

from specdec.v1 import verifier_pb2


class VerifyCall(Protocol):
    """One open Verify stream: write rounds, read verdicts (grpc.aio.EOF at its end)."""

    async def write(self, message: verifier_pb2.VerifyRequest) -> None: ...

    async def read(self) -> Any: ...  # a VerifyResponse, or grpc.aio.EOF

    async def done_writing(self) -> None: ...

    def cancel(self) -> bool: ...


class VerifyOpener(Protocol):
    """Opens Verify streams (verifier_pb2_grpc.VerifierStub, resumable_session.ResumingVerifier)."""

    def Verify(self) -> VerifyCall: ...  # noqa: N802 - the stub's method name
