"""A small real gRPC Verifier without a model, for drafter-side tests (pools, TLS, discovery).

It serves GetModelInfo (with a chosen tokenizer fingerprint, its open streams plus a load the
test sets, and a round price the test may set) and Verify: every round is answered with nothing accepted and `next_token`
as the recovered token, so a drafter's round loop runs against it unchanged. `break_after_rounds`
(None: never) makes every stream (with `break_once`, the first one) fail with UNAVAILABLE once it has answered that many rounds, as a
killed verifier's streams do; `opens` records every OpenSession received. A session opened with
return_prompt_cache gets, after its first verdict, the message that says the verifier cannot give
the prompt's keys and values (tokens 0), or, where the stream is to break after one round, the break.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc

from specdec.round_price import RoundPrice
from specdec.v1 import verifier_pb2, verifier_pb2_grpc


class FakeVerifier(verifier_pb2_grpc.VerifierServicer):
    def __init__(
        self,
        fingerprint: str,
        *,
        host: str = "127.0.0.1",
        max_sessions: int = 10,
        next_token: int = 42,
        credentials: grpc.ServerCredentials | None = None,
        break_after_rounds: int | None = None,
        break_once: bool = False,
        round_seconds: float = 0.0,
        price: RoundPrice = RoundPrice(),
        verdict_price: RoundPrice = RoundPrice(),
        sends_prompt_cache: bool = True,
    ) -> None:
        self.break_after_rounds = break_after_rounds
        self.break_once = break_once  # only the first stream to reach break_after_rounds breaks
        self.round_seconds = round_seconds  # how long each round takes to answer
        self.price = price  # the first-round price its ModelInfo reports
        self.verdict_price = verdict_price  # the next-round price every verdict reports
        self.sends_prompt_cache = sends_prompt_cache  # False: its ModelInfo says what an older verifier's does
        self.opens: list[verifier_pb2.OpenSession] = []
        self.fingerprint = fingerprint
        self.max_sessions = max_sessions
        self.next_token = next_token
        self.extra_load = 0  # sessions the test pretends other drafters hold
        self.streams = 0
        self.rounds = 0  # rounds received
        self.answered = 0  # rounds answered: received, and round_seconds passed
        self.info_calls = 0  # GetModelInfo polls answered
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        verifier_pb2_grpc.add_VerifierServicer_to_server(self, self.server)
        address = f"{host}:0"
        self.port = self.server.add_secure_port(address, credentials) if credentials else self.server.add_insecure_port(address)
        self.host = host
        self.address = f"{host}:{self.port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)

    def GetModelInfo(self, request, context) -> verifier_pb2.ModelInfo:  # type: ignore[no-untyped-def]
        self.info_calls += 1
        return verifier_pb2.ModelInfo(
            model_name="fake",
            vocab_size=49152,
            tokenizer_fingerprint=self.fingerprint,
            eos_token_ids=[2],
            context_length=8192,
            max_draft_tokens=32,
            max_draft_depth=16,
            max_sessions=self.max_sessions,
            open_sessions=self.streams + self.extra_load,
            price=self.price.to_proto(),
            sends_prompt_cache=self.sends_prompt_cache,
        )

    def Verify(self, request_iterator, context) -> Iterator[verifier_pb2.VerifyResponse]:  # type: ignore[no-untyped-def]
        with self._lock:
            self.streams += 1
        answered = 0
        prompt_cache = False
        try:
            for request in request_iterator:
                if request.WhichOneof("kind") == "open":
                    self.opens.append(request.open)
                    prompt_cache = request.open.return_prompt_cache
                if request.WhichOneof("kind") == "round":
                    if self.break_after_rounds is not None and answered >= self.break_after_rounds:
                        if self.break_once:
                            self.break_after_rounds = None
                        context.abort(grpc.StatusCode.UNAVAILABLE, "fake verifier: stream broken")
                    answered += 1
                    with self._lock:
                        self.rounds += 1
                    time.sleep(self.round_seconds)
                    with self._lock:
                        self.answered += 1
                    yield verifier_pb2.VerifyResponse(
                        num_accepted=0,
                        next_token_id=self.next_token,
                        acceptance_probs=[0.0] * len(request.round.nodes),
                        price=self.verdict_price.to_proto(),
                    )
                    if prompt_cache and answered == 1:
                        if self.break_after_rounds == 1:
                            if self.break_once:
                                self.break_after_rounds = None
                            context.abort(grpc.StatusCode.UNAVAILABLE, "fake verifier: stream broken")
                        yield verifier_pb2.VerifyResponse(prompt_cache=verifier_pb2.PromptCache())
                elif request.WhichOneof("kind") == "close":
                    return
        finally:
            with self._lock:
                self.streams -= 1
