"""Conversions between the Drafter's protobuf messages and plain dataclasses, with validation.

Every check names the offending request field; the verifier repeats the checks it depends on.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_svc.draft import Draft
from drafter_svc.drafter_names import DRAFTER_NAMES, MODEL_DRAFTERS
from drafter_svc.policies.registry import POLICY_NAMES
from drafter_svc.settings import DrafterSettings
from specdec.acceptance_params import AcceptanceParams, acceptance_from_proto, acceptance_to_proto
from specdec.errors import InvalidArgument
from specdec.output_constraint import OutputConstraint, constraint_from_proto, constraint_to_proto
from specdec.penalties import Penalties, penalties_from_proto, penalties_to_proto, validate_top_logprobs
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
    num_draft_tokens: int  # tree depth; 0: no speculation
    max_tree_nodes: int  # >= num_draft_tokens; equal: a chain
    acceptance: AcceptanceParams = AcceptanceParams()
    draft_policy: str = "fixed"  # one of policies.registry.POLICY_NAMES; num_draft_tokens is its longest
    overlap: bool = False  # draft the next round while the verifier checks this one
    constraint: OutputConstraint | None = None  # compiled by the round loop (generation.py) and the verifier
    penalties: Penalties = Penalties()
    logprobs: bool = False  # return each token's logprob, with top_logprobs alternatives
    top_logprobs: int = 0


OVERLAP_MODES = ("on", "off", "greedy")


@dataclass(frozen=True)
class Defaults:
    """What a request that does not say gets. The zero-cost drafters' shape (num_draft_tokens,
    max_tree_nodes) and the model drafters' (model_*) differ; overlap is on, off, or greedy
    (on at temperature 0 only). `busy_drafter` (empty: `drafter`) is the drafter of a request
    that arrives while the process or its verifier serves other sessions: under `--drafter auto`
    the copy drafter, which has no prefill and no model steps to take cores from a busy verifier
    (docs/design/hybrid-drafter.md)."""

    drafter: str
    num_draft_tokens: int
    max_tree_nodes: int
    max_new_tokens_cap: int
    # The service's own defaults (settings.py), written once.
    draft_policy: str = DrafterSettings.draft_policy
    overlap: str = DrafterSettings.overlap
    max_prompt_tokens: int = 0  # 0: only the verifier's context length
    model_num_draft_tokens: int = DrafterSettings.model_num_draft_tokens
    model_max_tree_nodes: int = DrafterSettings.model_max_tree_nodes
    busy_drafter: str = ""

    def __post_init__(self) -> None:
        if self.overlap not in OVERLAP_MODES:
            raise ValueError(f"overlap must be one of {', '.join(OVERLAP_MODES)}, got {self.overlap!r}")

    def shape(self, drafter: str) -> tuple[int, int]:
        """(draft length, tree nodes) for a request to `drafter` that names neither."""
        if drafter in MODEL_DRAFTERS:
            return self.model_num_draft_tokens, self.model_max_tree_nodes
        return self.num_draft_tokens, self.max_tree_nodes


@dataclass(frozen=True)
class VerifierLimits:
    context_length: int
    max_draft_tokens: int  # tree nodes per round
    max_draft_depth: int


def request_from_proto(
    msg: drafter_pb2.GenerateRequest, tokenizer: Tokenizer, limits: VerifierLimits, defaults: Defaults, busy: bool = False
) -> GenerationRequest:
    """The validated request; one that names no drafter gets defaults.busy_drafter when `busy`."""
    prompt = _prompt_ids(msg, tokenizer)
    if defaults.max_prompt_tokens and len(prompt) > defaults.max_prompt_tokens:
        raise InvalidArgument("prompt", f"{len(prompt)} tokens exceed this server's cap of {defaults.max_prompt_tokens} (max_prompt_tokens)")
    if len(prompt) >= limits.context_length:
        raise InvalidArgument("prompt", f"{len(prompt)} tokens leave no room in the model's context length of {limits.context_length}")
    if msg.max_new_tokens <= 0:
        raise InvalidArgument("max_new_tokens", f"must be > 0, got {msg.max_new_tokens}")
    if msg.max_new_tokens > defaults.max_new_tokens_cap:
        raise InvalidArgument("max_new_tokens", f"{msg.max_new_tokens} exceeds this server's cap of {defaults.max_new_tokens_cap}")
    sampling, seed = sampling_from_proto(msg.sampling)
    sampling.validate("sampling")
    if any(not s for s in msg.stop):
        raise InvalidArgument("stop", "stop strings must not be empty")
    drafter = msg.speculation.drafter or (busy and defaults.busy_drafter) or defaults.drafter
    if drafter not in DRAFTER_NAMES:
        raise InvalidArgument("speculation.drafter", f"unknown drafter {drafter!r}; choose one of {', '.join(DRAFTER_NAMES)}")
    k, nodes = _tree_shape(msg.speculation, limits, *defaults.shape(drafter))
    acceptance = acceptance_from_proto(msg.acceptance)
    acceptance.validate("acceptance", greedy=sampling.greedy)
    policy = msg.speculation.draft_policy or defaults.draft_policy
    if policy not in POLICY_NAMES:
        raise InvalidArgument("speculation.draft_policy", f"unknown draft policy {policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    penalties = penalties_from_proto(msg.penalties, "penalties")
    penalties.validate("penalties", tokenizer.vocab_size)
    validate_top_logprobs(msg.top_logprobs, "top_logprobs")
    if msg.top_logprobs and not msg.logprobs:
        raise InvalidArgument("top_logprobs", "needs logprobs set")
    if msg.speculation.HasField("overlap"):
        overlap = msg.speculation.overlap
    else:
        overlap = defaults.overlap == "on" or (defaults.overlap == "greedy" and sampling.greedy)
    return GenerationRequest(
        prompt_token_ids=prompt,
        max_new_tokens=msg.max_new_tokens,
        sampling=sampling,
        seed=seed,
        stop=list(msg.stop),
        drafter=drafter,
        num_draft_tokens=k,
        max_tree_nodes=nodes,
        acceptance=acceptance,
        draft_policy=policy,
        overlap=overlap,
        constraint=constraint_from_proto(msg.constraint),
        penalties=penalties,
        logprobs=msg.logprobs,
        top_logprobs=msg.top_logprobs,
    )


def _tree_shape(msg: drafter_pb2.SpeculationParams, limits: VerifierLimits, default_k: int, default_nodes: int) -> tuple[int, int]:
    """(depth, nodes) of each round's token tree, within the verifier's limits."""
    max_depth = min(limits.max_draft_depth, limits.max_draft_tokens)
    k = msg.num_draft_tokens if msg.HasField("num_draft_tokens") else min(default_k, max_depth)
    if not 0 <= k <= max_depth:
        raise InvalidArgument("speculation.num_draft_tokens", f"must be in [0, {max_depth}] (the verifier's limit), got {k}")
    if msg.HasField("max_tree_nodes"):
        nodes = msg.max_tree_nodes
        if not k <= nodes <= limits.max_draft_tokens:
            raise InvalidArgument(
                "speculation.max_tree_nodes",
                f"must be in [num_draft_tokens = {k}, {limits.max_draft_tokens}] (the verifier's limit), got {nodes}",
            )
        return k, nodes
    # The default shape scales with the draft length: a chain of k plus the same share of branches.
    nodes = k * default_nodes // max(default_k, 1)
    return k, min(max(nodes, k), limits.max_draft_tokens)


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


def open_message(request: GenerationRequest, return_prompt_cache: bool = False) -> verifier_pb2.VerifyRequest:
    sampling = sampling_to_proto(request.sampling, request.seed)
    return verifier_pb2.VerifyRequest(
        open=verifier_pb2.OpenSession(
            prompt_token_ids=request.prompt_token_ids, sampling=sampling, acceptance=acceptance_to_proto(request.acceptance),
            constraint=constraint_to_proto(request.constraint), penalties=penalties_to_proto(request.penalties),
            logprobs=request.logprobs, top_logprobs=request.top_logprobs, plain=request.num_draft_tokens == 0,
            return_prompt_cache=return_prompt_cache,
        )
    )


def round_message(draft: Draft) -> verifier_pb2.VerifyRequest:
    return verifier_pb2.VerifyRequest(
        round=verifier_pb2.Round(
            nodes=[
                verifier_pb2.DraftNode(parent=parent, token_id=t, q=common_pb2.SparseDistribution(token_ids=ids, probs=probs))
                for t, parent, ids, probs in zip(draft.token_ids, draft.parents, draft.q_token_ids, draft.q_probs)
            ]
        )
    )
