"""The round loop of one generation: draft, send the round to the verifier, stream the result.

Each round: the drafter proposes a token tree (depth up to k, a chain or branches) with each
node's q; the verifier answers in one target pass with the accepted path plus a recovered or bonus
token; the drafter learns from the verdict.
With k = 0 every round is one plain target step: the no-speculation baseline on the same path.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from drafter_svc.detokenizer import IncrementalDetokenizer
from drafter_svc.drafter import ROOT, Draft, Feedback, make_drafter
from drafter_svc.protocol import GenerationRequest, open_message, round_message
from drafter_svc.stop_strings import StopStringMatcher
from specdec.errors import Unavailable
from specdec.tokenizer import Tokenizer
from specdec.v1 import drafter_pb2, verifier_pb2, verifier_pb2_grpc


@dataclass
class Stats:
    prompt_tokens: int
    drafter: str
    num_draft_tokens: int
    max_tree_nodes: int
    acceptance_rule: str = "exact"
    generated_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    round_trip_seconds: float = 0.0
    time_to_first_token_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    def to_proto(self) -> drafter_pb2.GenerationStats:
        return drafter_pb2.GenerationStats(
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            rounds=self.rounds,
            drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens,
            acceptance_rate=self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0,
            mean_acceptance_length=1.0 + self.accepted_tokens / self.rounds if self.rounds else 0.0,
            draft_seconds=self.draft_seconds,
            verify_seconds=self.verify_seconds,
            network_seconds=max(0.0, self.round_trip_seconds - self.verify_seconds),
            total_seconds=time.perf_counter() - self.started,
            time_to_first_token_seconds=self.time_to_first_token_seconds,
            drafter=self.drafter,
            num_draft_tokens=self.num_draft_tokens,
            max_tree_nodes=self.max_tree_nodes,
            acceptance_rule=self.acceptance_rule,
        )


def _accepted_path(draft: Draft, nodes: list[int]) -> list[int]:
    """The verdict's accepted nodes, checked to be a root-down path of the draft."""
    parent = ROOT
    for node in nodes:
        if not 0 <= node < len(draft) or draft.parents[node] != parent:
            raise Unavailable("", f"the verifier answered with accepted nodes {nodes}, not a path of the draft")
        parent = node
    return nodes


@dataclass(frozen=True)
class VerifierInfo:
    eos_token_ids: frozenset[int]
    context_length: int


async def generate(
    request: GenerationRequest, stub: verifier_pb2_grpc.VerifierStub, tokenizer: Tokenizer, info: VerifierInfo
) -> AsyncIterator[drafter_pb2.GenerateResponse]:
    """Yield text deltas with their token ids; the last response has the finish reason and stats."""
    stats = Stats(
        len(request.prompt_token_ids), request.drafter, request.num_draft_tokens, request.max_tree_nodes, str(request.acceptance)
    )
    drafter = make_drafter(request.drafter)
    detokenizer = IncrementalDetokenizer(tokenizer.decode, request.prompt_token_ids)
    stopper = StopStringMatcher(request.stop)
    context = list(request.prompt_token_ids)
    call = stub.Verify()
    try:
        await call.write(open_message(request))
        while True:
            room = min(request.max_new_tokens - stats.generated_tokens, info.context_length - len(context))
            budget = min(request.num_draft_tokens, room - 1)
            started = time.perf_counter()
            draft = drafter.propose(context, budget, request.max_tree_nodes) if budget > 0 else Draft.point_masses([])
            stats.draft_seconds += time.perf_counter() - started

            started = time.perf_counter()
            await call.write(round_message(draft))
            verdict: verifier_pb2.VerifyResponse = await call.read()
            if verdict is grpc.aio.EOF:
                raise Unavailable("", "the verifier ended the session unexpectedly")
            stats.round_trip_seconds += time.perf_counter() - started
            if stats.rounds == 0:
                stats.time_to_first_token_seconds = time.perf_counter() - stats.started
            path = _accepted_path(draft, list(verdict.accepted_nodes))
            emitted = [*draft.path_tokens(path), verdict.next_token_id]
            drafter.observe(Feedback(len(draft), path, list(verdict.acceptance_probs), emitted))
            stats.rounds += 1
            stats.drafted_tokens += len(draft)
            stats.accepted_tokens += len(path)
            stats.verify_seconds += verdict.verify_seconds

            finish = drafter_pb2.FINISH_REASON_UNSPECIFIED
            eos_at = next((i for i, t in enumerate(emitted) if t in info.eos_token_ids), None)
            if eos_at is not None:
                emitted, finish = emitted[:eos_at], drafter_pb2.FINISH_REASON_EOS
            context += emitted
            stats.generated_tokens += len(emitted)
            text, stopped = stopper.push(detokenizer.push(emitted))
            if stopped:
                finish = drafter_pb2.FINISH_REASON_STOP
            elif finish == drafter_pb2.FINISH_REASON_UNSPECIFIED and stats.generated_tokens >= request.max_new_tokens:
                finish = drafter_pb2.FINISH_REASON_LENGTH
            elif finish == drafter_pb2.FINISH_REASON_UNSPECIFIED and len(context) >= info.context_length:
                finish = drafter_pb2.FINISH_REASON_CONTEXT_LENGTH
            if finish != drafter_pb2.FINISH_REASON_UNSPECIFIED and not stopped:
                tail, stopped = stopper.push(detokenizer.flush())
                text += tail if stopped else tail + stopper.flush()
                finish = drafter_pb2.FINISH_REASON_STOP if stopped else finish
            if finish != drafter_pb2.FINISH_REASON_UNSPECIFIED:
                await call.write(verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession()))
                await call.done_writing()
                yield drafter_pb2.GenerateResponse(text=text, token_ids=emitted, finish_reason=finish, stats=stats.to_proto())
                return
            yield drafter_pb2.GenerateResponse(text=text, token_ids=emitted)
    finally:
        call.cancel()
