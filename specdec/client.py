"""The Python client: `Client("host:port").generate(...)`, a streaming variant, and AsyncClient.

Torch-free: it needs only grpcio and the generated stubs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field

import grpc

from specdec.acceptance_params import acceptance_to_proto, parse
from specdec.auth import authorization_metadata
from specdec.output_constraint import OutputConstraint, constraint_to_proto
from specdec.penalties import Penalties, penalties_to_proto
from specdec.v1 import common_pb2, drafter_pb2, drafter_pb2_grpc


@dataclass(frozen=True)
class GenerationStats:
    """Statistics of one generation (see GenerationStats in protos/specdec/v1/drafter.proto)."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_rate: float = 0.0
    mean_acceptance_length: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    network_seconds: float = 0.0
    total_seconds: float = 0.0
    time_to_first_token_seconds: float = 0.0
    drafter: str = ""
    num_draft_tokens: int = 0
    max_tree_nodes: int = 0
    acceptance_rule: str = ""  # "exact", "lenient:L" or "mentored:D"
    draft_policy: str = ""
    overlap: bool = False
    discarded_tokens: int = 0
    overlap_hits: int = 0
    overlap_misses: int = 0
    hidden_draft_seconds: float = 0.0
    copied_rounds: int = 0  # rounds of a hybrid session that sent a copy draft instead of its model's
    drafted_by_position: tuple[int, ...] = ()  # per draft depth: rounds whose draft reached it
    accepted_by_position: tuple[int, ...] = ()  # per draft depth: rounds whose accepted path reached it
    q_bytes: int = 0  # serialized draft distributions sent to the verifier
    resumes: int = 0  # verifier sessions re-opened after a broken stream (output unaffected)
    forced_tokens: int = 0  # drafted tokens the constraint's grammar forced
    prompt_tokens_from_verifier: int = 0  # prompt tokens whose keys and values the model drafter took from the verifier

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.total_seconds if self.total_seconds else 0.0

    @property
    def verification_rate(self) -> float:
        """Target passes per generated token (SpecDec++'s N_target / N)."""
        return self.rounds / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def discard_rate(self) -> float:
        """Discarded drafted tokens per generated token (SpecDec++'s N_discarded / N)."""
        return self.discarded_tokens / self.generated_tokens if self.generated_tokens else 0.0

    @classmethod
    def from_proto(cls, msg: drafter_pb2.GenerationStats) -> GenerationStats:
        values = {f.name: getattr(msg, f.name) for f in dataclasses.fields(cls)}
        return cls(**{k: v if isinstance(v, (bool, int, float, str)) else tuple(v) for k, v in values.items()})


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability under the target's own distribution (before
    temperature, truncation, penalties and constraints) and the most likely alternatives there."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first


@dataclass(frozen=True)
class Chunk:
    """One streamed response: a text delta and its tokens; the last one has finish_reason and stats."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stats: GenerationStats | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per token id, when asked


@dataclass(frozen=True)
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    logprobs: list[TokenLogprob] = field(default_factory=list)


def build_request(
    prompt: str | None = None,
    *,
    messages: Sequence[dict[str, str]] | None = None,
    token_ids: Sequence[int] | None = None,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop: Sequence[str] = (),
    drafter: str = "",
    num_draft_tokens: int | None = None,
    max_tree_nodes: int | None = None,
    acceptance: str | None = None,
    draft_policy: str = "",
    overlap: bool | None = None,
    json_schema: str | None = None,
    regex: str | None = None,
    grammar: str | None = None,
    logprobs: bool = False,
    top_logprobs: int = 0,
    penalties: Penalties | None = None,
) -> drafter_pb2.GenerateRequest:
    """Exactly one of prompt (plain text), messages (chat) or token_ids.

    acceptance: "exact" (None: the default), or an opt-in lossy rule "lenient:L" (L in (0, 1]:
    no token more than 1/L times as likely as under the target) or "mentored:D" (KL budget
    D >= 0 per token; temperature > 0 only). The servers validate it (INVALID_ARGUMENT).
    At most one of json_schema (JSON text), regex or grammar (Lark/EBNF) constrains the output;
    logprobs (with top_logprobs in [0, 20] alternatives) returns each token's logprob.
    """
    if sum(x is not None for x in (prompt, messages, token_ids)) != 1:
        raise ValueError("give exactly one of prompt, messages or token_ids")
    request = drafter_pb2.GenerateRequest(
        max_new_tokens=max_new_tokens,
        sampling=common_pb2.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p),
        stop=list(stop),
        speculation=drafter_pb2.SpeculationParams(drafter=drafter, draft_policy=draft_policy),
    )
    if prompt is not None:
        request.text = prompt
    elif messages is not None:
        request.chat.messages.extend(drafter_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages)
    else:
        request.token_ids.ids.extend(token_ids or [])
    if seed is not None:
        request.sampling.seed = seed
    if num_draft_tokens is not None:
        request.speculation.num_draft_tokens = num_draft_tokens
    if max_tree_nodes is not None:
        request.speculation.max_tree_nodes = max_tree_nodes
    if acceptance is not None:
        request.acceptance.CopyFrom(acceptance_to_proto(parse(acceptance)))
    if overlap is not None:
        request.speculation.overlap = overlap
    constraints = [OutputConstraint(k, v) for k, v in (("json_schema", json_schema), ("regex", regex), ("grammar", grammar)) if v is not None]
    if len(constraints) > 1:
        raise ValueError("give at most one of json_schema, regex or grammar")
    if constraints:
        request.constraint.CopyFrom(constraint_to_proto(constraints[0]))
    request.logprobs = logprobs
    request.top_logprobs = top_logprobs
    if penalties is not None:
        request.penalties.CopyFrom(penalties_to_proto(penalties))
    return request


def chunk_from_proto(msg: drafter_pb2.GenerateResponse) -> Chunk:
    final = msg.finish_reason != drafter_pb2.FINISH_REASON_UNSPECIFIED
    return Chunk(
        text=msg.text,
        token_ids=list(msg.token_ids),
        finish_reason=drafter_pb2.FinishReason.Name(msg.finish_reason).removeprefix("FINISH_REASON_").lower() if final else None,
        stats=GenerationStats.from_proto(msg.stats) if final else None,
        logprobs=[TokenLogprob(lp.token_id, lp.logprob, tuple(zip(lp.top_token_ids, lp.top_logprobs))) for lp in msg.logprobs],
    )


def collect(chunks: Sequence[Chunk]) -> GenerationResult:
    last = chunks[-1]
    return GenerationResult(
        text="".join(c.text for c in chunks),
        token_ids=[t for c in chunks for t in c.token_ids],
        finish_reason=last.finish_reason or "",
        stats=last.stats or GenerationStats(),
        logprobs=[lp for c in chunks for lp in c.logprobs],
    )


class Client:
    """Blocking client of a drafter service. Keyword arguments as in build_request."""

    def __init__(
        self, address: str, timeout: float | None = None, credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
    ) -> None:
        """credentials: TLS (specdec.tls.channel_credentials); None: plaintext. token: the
        bearer token a drafter started with --auth-token-file requires."""
        self._channel = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
        self._stub = drafter_pb2_grpc.DrafterStub(self._channel)
        self._timeout = timeout
        self._metadata = authorization_metadata(token) if token else None

    def stream(self, prompt: str | None = None, **kwargs) -> Iterator[Chunk]:  # type: ignore[no-untyped-def]
        call = self._stub.Generate(build_request(prompt, **kwargs), timeout=self._timeout, metadata=self._metadata)
        try:
            for msg in call:
                yield chunk_from_proto(msg)
        finally:
            call.cancel()

    def generate(self, prompt: str | None = None, **kwargs) -> GenerationResult:  # type: ignore[no-untyped-def]
        return collect(list(self.stream(prompt, **kwargs)))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """asyncio client of a drafter service. Keyword arguments as in build_request."""

    def __init__(
        self, address: str, timeout: float | None = None, credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
    ) -> None:
        self._channel = (
            grpc.aio.secure_channel(address, credentials) if credentials else grpc.aio.insecure_channel(address)
        )
        self._stub = drafter_pb2_grpc.DrafterStub(self._channel)
        self._timeout = timeout
        self._metadata = authorization_metadata(token) if token else None

    async def stream(self, prompt: str | None = None, **kwargs) -> AsyncIterator[Chunk]:  # type: ignore[no-untyped-def]
        call = self._stub.Generate(build_request(prompt, **kwargs), timeout=self._timeout, metadata=self._metadata)
        try:
            async for msg in call:
                yield chunk_from_proto(msg)
        finally:
            call.cancel()

    async def generate(self, prompt: str | None = None, **kwargs) -> GenerationResult:  # type: ignore[no-untyped-def]
        return collect([c async for c in self.stream(prompt, **kwargs)])

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
