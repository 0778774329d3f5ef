"""Conversions between the Drafter's protobuf messages and plain dataclasses, with validation.

Every check names the offending request field; the verifier repeats the checks it depends on.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_svc.drafter import DRAFTER_NAMES
from specdec.errors import InvalidArgument
from specdec.sampling_params import SamplingParams, sampling_from_proto, sampling_to_proto
from specdec.tokenizer import Tokenizer
from specdec.v1 import common_pb2, drafter_pb2, verifier_pb2


@dataclass(frozen=True)
class GenerationRequest:
    prompt_token_ids: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    seed: int | None
    stop: list[str]
    drafter: str
    num_draft_tokens: int


@dataclass(frozen=True)
class Defaults:
    drafter: str
    num_draft_tokens: int
    max_new_tokens_cap: int


def request_from_proto(
    msg: drafter_pb2.GenerateRequest, tokenizer: Tokenizer, context_length: int, max_draft_tokens: int, defaults: Defaults
) -> GenerationRequest:
    prompt = _prompt_ids(msg, tokenizer)
    if len(prompt) >= context_length:
        raise InvalidArgument("prompt", f"{len(prompt)} tokens leave no room in the model's context length of {context_length}")
    if msg.max_new_tokens <= 0:
        raise InvalidArgument("max_new_tokens", f"must be > 0, got {msg.max_new_tokens}")
    if msg.max_new_tokens > defaults.max_new_tokens_cap:
        raise InvalidArgument("max_new_tokens", f"{msg.max_new_tokens} exceeds this server's cap of {defaults.max_new_tokens_cap}")
    sampling, seed = sampling_from_proto(msg.sampling)
    sampling.validate("sampling")
    if any(not s for s in msg.stop):
        raise InvalidArgument("stop", "stop strings must not be empty")
    drafter = msg.speculation.drafter or defaults.drafter
    if drafter not in DRAFTER_NAMES:
        raise InvalidArgument("speculation.drafter", f"unknown drafter {drafter!r}; choose one of {', '.join(DRAFTER_NAMES)}")
    k = msg.speculation.num_draft_tokens if msg.speculation.HasField("num_draft_tokens") else defaults.num_draft_tokens
    if not 0 <= k <= max_draft_tokens:
        raise InvalidArgument("speculation.num_draft_tokens", f"must be in [0, {max_draft_tokens}] (the verifier's limit), got {k}")
    return GenerationRequest(
        prompt_token_ids=prompt,
        max_new_tokens=msg.max_new_tokens,
        sampling=sampling,
        seed=seed,
        stop=list(msg.stop),
        drafter=drafter,
        num_draft_tokens=k,
    )


def _prompt_ids(msg: drafter_pb2.GenerateRequest, tokenizer: Tokenizer) -> list[int]:
    kind = msg.WhichOneof("prompt")
    if kind == "text":
        if not msg.text:
            raise InvalidArgument("text", "the prompt must not be empty")
        return tokenizer.encode(msg.text)
    if kind == "chat":
        if not msg.chat.messages:
            raise InvalidArgument("chat.messages", "must not be empty")
        for i, m in enumerate(msg.chat.messages):
            if not m.role:
                raise InvalidArgument(f"chat.messages[{i}].role", "must not be empty")
        return tokenizer.encode_chat([{"role": m.role, "content": m.content} for m in msg.chat.messages])
    if kind == "token_ids":
        ids = list(msg.token_ids.ids)
        if not ids:
            raise InvalidArgument("token_ids.ids", "the prompt must not be empty")
        bad = next((t for t in ids if not 0 <= t < tokenizer.vocab_size), None)
        if bad is not None:
            raise InvalidArgument("token_ids.ids", f"token id {bad} is outside the vocabulary [0, {tokenizer.vocab_size})")
        return ids
    raise InvalidArgument("prompt", "set one of text, chat or token_ids")


def open_message(request: GenerationRequest) -> verifier_pb2.VerifyRequest:
    sampling = sampling_to_proto(request.sampling, request.seed)
    return verifier_pb2.VerifyRequest(
        open=verifier_pb2.OpenSession(prompt_token_ids=request.prompt_token_ids, sampling=sampling)
    )


def round_message(token_ids: list[int], q_token_ids: list[list[int]], q_probs: list[list[float]]) -> verifier_pb2.VerifyRequest:
    return verifier_pb2.VerifyRequest(
        round=verifier_pb2.Round(
            draft_tokens=[
                verifier_pb2.DraftToken(token_id=t, q=common_pb2.SparseDistribution(token_ids=ids, probs=probs))
                for t, ids, probs in zip(token_ids, q_token_ids, q_probs)
            ]
        )
    )
