"""One generation session on the verifier: its tokens, KV cache, sampling settings and RNG.

Each round is ONE target pass over the tokens not yet cached (the last committed token, or the
whole prompt on the first round) plus the drafts; the exact rule (acceptance.py) then decides,
and the cache is rolled back to the committed prefix.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from specdec.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from specdec.sampling_params import SamplingParams
from verifier_svc.acceptance import RoundVerdict, verify_greedy, verify_speculative
from verifier_svc.sampling import standardize
from verifier_svc.target_model import TargetModel

# How far a declared q may be from summing to 1 (float32 on the wire).
Q_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class RoundInput:
    """A drafted chain: token i was sampled from q_i = (q_token_ids[i], q_probs[i])."""

    draft_tokens: list[int]
    q_token_ids: list[list[int]]
    q_probs: list[list[float]]


@dataclass(frozen=True)
class Limits:
    max_draft_tokens: int
    context_length: int


class Session:
    """Committed tokens = prompt + everything emitted; the cache holds all but the last one."""

    def __init__(
        self, target: TargetModel, prompt: list[int], sampling: SamplingParams, seed: int | None, limits: Limits
    ) -> None:
        if not prompt:
            raise InvalidArgument("open.prompt_token_ids", "must not be empty")
        if len(prompt) >= limits.context_length:
            raise InvalidArgument(
                "open.prompt_token_ids",
                f"{len(prompt)} tokens leave no room in the context length of {limits.context_length}",
            )
        _check_ids(prompt, target.vocab_size, "open.prompt_token_ids")
        sampling.validate("open.sampling")
        self.target = target
        self.limits = limits
        self.sampling = sampling
        self.tokens = list(prompt)
        self.cache = target.new_cache()
        self.generator = torch.Generator().manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
        self.closed = False

    def verify(self, round_: RoundInput) -> RoundVerdict:
        """Run one round: one target pass, the acceptance rule, the cache rolled back."""
        if self.closed:
            raise FailedPrecondition("round", "the session has ended")
        k = len(round_.draft_tokens)
        if k > self.limits.max_draft_tokens:
            raise InvalidArgument("round.draft_tokens", f"{k} drafted tokens exceed this verifier's limit of {self.limits.max_draft_tokens}")
        if len(self.tokens) + k + 1 > self.limits.context_length:
            raise InvalidArgument(
                "round.draft_tokens",
                f"{len(self.tokens)} tokens + {k} drafts + 1 exceed the context length of {self.limits.context_length}",
            )
        _check_ids(round_.draft_tokens, self.target.vocab_size, "round.draft_tokens.token_id")
        q_ids, q_probs = _q_tensors(round_, self.target.vocab_size)

        pending = self.tokens[len(self.cache):]
        logits = self.target.score(self.cache, pending + round_.draft_tokens, num_logits=k + 1)  # [k+1, vocab]
        drafts = torch.tensor(round_.draft_tokens, dtype=torch.long)
        if self.sampling.greedy:
            verdict = verify_greedy(logits, drafts)
        else:
            verdict = verify_speculative(standardize(logits, self.sampling), drafts, q_ids, q_probs, self.generator)

        self.tokens += round_.draft_tokens[: verdict.num_accepted] + [verdict.next_token]
        self.cache.truncate(len(self.tokens) - 1)
        return verdict


def _check_ids(ids: list[int], vocab_size: int, field: str) -> None:
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidArgument(field, f"token id {bad} is outside the vocabulary [0, {vocab_size})")


def _q_tensors(round_: RoundInput, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate each declared q and pad them to [k, S] tensors (padding: id 0, probability 0)."""
    k = len(round_.draft_tokens)
    if len(round_.q_token_ids) != k or len(round_.q_probs) != k:
        raise InvalidArgument("round.draft_tokens.q", "every drafted token needs its q")
    width = max((len(ids) for ids in round_.q_token_ids), default=1)
    q_ids = torch.zeros((k, width), dtype=torch.long)
    q_probs = torch.zeros((k, width), dtype=torch.float32)
    for i, (token, ids, probs) in enumerate(zip(round_.draft_tokens, round_.q_token_ids, round_.q_probs)):
        field = f"round.draft_tokens[{i}].q"
        if not ids or len(ids) != len(probs):
            raise InvalidArgument(field, "token_ids and probs must be non-empty and of equal length")
        _check_ids(ids, vocab_size, f"{field}.token_ids")
        if len(set(ids)) != len(ids):
            raise InvalidArgument(f"{field}.token_ids", "token ids must be distinct")
        if any(not math.isfinite(p) or p < 0 or p > 1 for p in probs):
            raise InvalidArgument(f"{field}.probs", "probabilities must be finite and in [0, 1]")
        if abs(math.fsum(probs) - 1.0) > Q_SUM_TOLERANCE:
            raise InvalidArgument(f"{field}.probs", f"q is not a distribution: it sums to {math.fsum(probs):.6f}")
        if token not in ids or probs[ids.index(token)] <= 0:
            raise InvalidArgument(field, f"q gives no probability to its drafted token {token}")
        q_ids[i, : len(ids)] = torch.tensor(ids)
        q_probs[i, : len(probs)] = torch.tensor(probs)
    return q_ids, q_probs


class SessionTable:
    """Counts open sessions against the limit (RESOURCE_EXHAUSTED past it)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.open = 0

    def reserve(self) -> None:
        if self.open >= self.max_sessions:
            raise ResourceExhausted("open", f"this verifier already serves {self.open} sessions (its limit); retry later or use another verifier")
        self.open += 1

    def release(self) -> None:
        self.open -= 1
