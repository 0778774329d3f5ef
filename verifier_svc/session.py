"""One generation session on the verifier: its tokens, KV cache, sampling settings and RNG.

Each round is ONE target pass over the tokens not yet cached (the last committed token, or the
whole prompt on the first round) plus the round's token tree; the exact rule (acceptance.py)
then walks the tree, and the cache keeps only the committed prefix and the accepted path. A
session may opt into a lossy rule instead (lossy_acceptance.py: lenient or mentored). The rule
runs on the target's logits after the session's output rules (output_rules.py: a constraint's
masks and penalties, every tree node from its own path).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from specdec.acceptance_params import AcceptanceParams
from specdec.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from specdec.grammar import GrammarCompiler
from specdec.sampling_params import SamplingParams
from specdec.coupled_sampling import RaceNoise, race_seed
from verifier_svc.acceptance import RoundVerdict, verify_coupled, verify_greedy, verify_speculative
from verifier_svc.lossy_acceptance import make_rule, verify_greedy_lenient
from verifier_svc.output_rules import OutputOptions, OutputRules
from verifier_svc.prefix_cache import PrefixCache
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, TokenTree, build_tree

# How far a declared q may be from summing to 1 (float32 on the wire).
Q_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class RoundInput:
    """A drafted token tree: node i holds tokens[i], hangs under parents[i] (ROOT = -1, or an
    earlier node) and was sampled from q_i = (q_token_ids[i], q_probs[i])."""

    tokens: list[int]
    parents: list[int]
    q_token_ids: list[list[int]]
    q_probs: list[list[float]]

    @staticmethod
    def point_masses(tokens: list[int], parents: list[int] | None = None) -> RoundInput:
        """A deterministic drafter's round; without parents, a chain."""
        tree = list(range(ROOT, len(tokens) - 1)) if parents is None else parents
        return RoundInput(tokens, tree, [[t] for t in tokens], [[1.0] for _ in tokens])


@dataclass(frozen=True)
class Limits:
    max_draft_tokens: int  # nodes per round
    max_draft_depth: int  # nodes on one root-to-leaf path
    context_length: int


class Session:
    """Committed tokens = prompt + everything emitted; the cache holds all but the last one."""

    def __init__(
        self,
        target: TargetModel,
        prompt: list[int],
        sampling: SamplingParams,
        seed: int | None,
        limits: Limits,
        acceptance: AcceptanceParams = AcceptanceParams(),
        prefix_cache: PrefixCache | None = None,
        output: OutputOptions = OutputOptions(),
        compiler: GrammarCompiler | None = None,
        eos_token_ids: frozenset[int] = frozenset(),
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
        acceptance.validate("open.acceptance", greedy=sampling.greedy)
        self.acceptance = acceptance
        self.rule = make_rule(acceptance)
        self.target = target
        self.limits = limits
        self.sampling = sampling
        self.tokens = list(prompt)
        # The constraint, penalties and logprob requests (output_rules.py); compiled here, on the
        # event loop's thread: a grammar compiles in about a millisecond, once per distinct one.
        self.output = OutputRules(output, self.tokens, target.vocab_size, eos_token_ids, compiler)
        self.cache = target.new_cache()
        # The first round's pass covers the prompt beyond the longest stored prefix, then offers it.
        # The prefix is copied into the cache by the first prepare(), on the target's thread.
        self.prefix_cache = prefix_cache
        self._stored_prefix = prefix_cache.lookup(prompt) if prefix_cache else None
        self.reused_prompt_tokens = self._stored_prefix.length if self._stored_prefix else 0
        self._prompt_offered = prefix_cache is None
        self.generator = torch.Generator().manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1)
        # A seeded sampled session under the exact rule emits the exponential race's tokens, the
        # same whatever the drafts (acceptance.verify_coupled).
        racing = race_seed(seed, sampling, acceptance)
        self.race = RaceNoise(racing, target.vocab_size) if racing is not None else None
        self.closed = False

    def verify(self, round_: RoundInput) -> RoundVerdict:
        """Run one round: one target pass over the tree, the acceptance walk, the cache cut
        down to the committed prefix plus the accepted path."""
        prepared = self.prepare(round_)
        return self.finish(prepared, self.target.score(self.cache, prepared.pending, prepared.tree))

    def prepare(self, round_: RoundInput) -> PreparedRound:
        """Validate a round (InvalidArgument / FailedPrecondition naming the problem) and
        return what its target pass needs; touches no state but the cache's stored prefix, which
        the first call copies in (restore_prefix). A batched pass (batched_pass.py)
        scores several sessions' prepared rounds at once."""
        if self.closed:
            raise FailedPrecondition("round", "the session has ended")
        self.restore_prefix()
        tree = _checked_tree(round_, self.limits, self.target.vocab_size)
        if len(self.tokens) + tree.depth() + 1 > self.limits.context_length:
            raise InvalidArgument(
                "round.nodes",
                f"{len(self.tokens)} tokens + a tree of depth {tree.depth()} + 1 exceed the context length of {self.limits.context_length}",
            )
        q_ids, q_probs = _q_tensors(round_, self.target.vocab_size)
        start = len(self.cache)
        return PreparedRound(round_, tree, q_ids, q_probs, start, self.tokens[start:])

    def restore_prefix(self) -> None:
        """Copy the stored prompt prefix found when the session opened into its cache (once;
        prepare() does it, so the copy runs on the thread that runs the target)."""
        if self._stored_prefix is not None:
            self._stored_prefix.fill(self.cache)
            self._stored_prefix = None

    def cached_tokens(self) -> int:
        """Entries in the cache, the stored prefix not yet copied in counted."""
        return len(self.cache) + (self._stored_prefix.length if self._stored_prefix else 0)

    def finish(self, prepared: PreparedRound, logits: torch.Tensor) -> RoundVerdict:
        """Given the target's [n+1, vocab] logits for a prepared round (the cache having grown
        by its pending tokens and nodes), walk the tree and commit: the tokens gain the accepted
        path and the next token, the cache keeps the committed prefix and the accepted path. After
        the first round the prompt (but its last token) is offered to the prefix cache."""
        verdict = self._accept(logits, prepared)
        emitted = [prepared.round.tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token]
        if self.output.options.logprobs:
            rows = [0, *(i + 1 for i in verdict.accepted_nodes)]
            verdict = replace(verdict, logprobs=self.output.logprobs(logits, rows, emitted))
        self.output.commit(emitted)
        self.tokens += emitted
        committed = prepared.start + len(prepared.pending)
        self.cache.keep(committed, verdict.accepted_nodes)
        if not self._prompt_offered and self.prefix_cache is not None:
            self.prefix_cache.store(self.tokens[: committed - 1], self.cache)
            self._prompt_offered = True
        return verdict

    def _accept(self, logits: torch.Tensor, prepared: PreparedRound) -> RoundVerdict:
        """The acceptance rule: the greedy walk (lenient if asked), or speculative sampling over
        the tree with the session's rule (exact, lenient or mentored)."""
        tree, q_ids, q_probs = prepared.tree, prepared.q_ids, prepared.q_probs
        # Penalties and the constraint's masks, every row from its own path (output_rules.py).
        scores, allowed = self.output.processed_logits(logits, tree) if self.output.shapes_logits else (logits, None)
        if self.sampling.greedy and self.acceptance.rule == "lenient":
            verdict = verify_greedy_lenient(self.output.greedy_logits(scores, allowed), tree, self.acceptance.parameter)
        elif self.sampling.greedy:
            verdict = verify_greedy(self.output.greedy_logits(scores, allowed), tree)
        elif self.race is not None:
            verdict = verify_coupled(self.output.probs(scores, allowed, self.sampling), tree, q_ids, q_probs, self._race_exps(self.race, tree))
        else:
            verdict = verify_speculative(self.output.probs(scores, allowed, self.sampling), tree, q_ids, q_probs, self.generator, self.rule)
        return verdict

    def _race_exps(self, race: RaceNoise, tree: TokenTree) -> torch.Tensor:
        """[n+1, vocab] the Exp(1) rows of the positions a round's rows sample: row 0 the next
        token's (its index in prompt + output), row i+1 that plus node i's depth."""
        first = len(self.tokens)
        race.forget_before(first)
        return torch.from_numpy(race.rows([first, *(first + tree.depths).tolist()]))


@dataclass(frozen=True)
class PreparedRound:
    """A validated round, ready for its target pass."""

    round: RoundInput
    tree: TokenTree
    q_ids: torch.Tensor  # [n, S]
    q_probs: torch.Tensor  # [n, S]
    start: int  # cache length before the pass
    pending: list[int]  # committed tokens not yet cached; the last one is the tree's root

    def cut(self, prefix: RoundInput) -> PreparedRound:
        """This round with only `prefix`, its first nodes (scheduler.prune), each with its q:
        no validation again (a prefix of a valid round is valid)."""
        n = len(prefix.tokens)
        return replace(self, round=prefix, tree=build_tree(prefix.tokens, prefix.parents), q_ids=self.q_ids[:n], q_probs=self.q_probs[:n])


def _checked_tree(round_: RoundInput, limits: Limits, vocab_size: int) -> TokenTree:
    """The round's tree, or InvalidArgument naming the first problem."""
    n = len(round_.tokens)
    if n > limits.max_draft_tokens:
        raise InvalidArgument("round.nodes", f"{n} nodes exceed this verifier's limit of {limits.max_draft_tokens}")
    if len(round_.parents) != n:
        raise InvalidArgument("round.nodes.parent", "every node needs its parent")
    depths: list[int] = []
    for i, parent in enumerate(round_.parents):
        field = f"round.nodes[{i}].parent"
        if parent == i:
            raise InvalidArgument(field, f"node {i} is its own parent (a cycle)")
        if not ROOT <= parent < n:
            raise InvalidArgument(field, f"{parent} is out of range: a parent is -1 (the root) or a node index in [0, {n})")
        if parent > i:
            raise InvalidArgument(field, f"parent {parent} comes after node {i}: parents must come before their children (no cycles)")
        depths.append(1 if parent == ROOT else depths[parent] + 1)
        if depths[i] > limits.max_draft_depth:
            raise InvalidArgument("round.nodes", f"node {i} is at depth {depths[i]}, beyond this verifier's limit of {limits.max_draft_depth}")
    _check_ids(round_.tokens, vocab_size, "round.nodes.token_id")
    return build_tree(round_.tokens, round_.parents)


def _check_ids(ids: Sequence[int] | torch.Tensor, vocab_size: int, field: str) -> None:
    if isinstance(ids, torch.Tensor):
        outside = ids[(ids < 0) | (ids >= vocab_size)].tolist()
    else:  # plain Python: the prompt is checked on the event loop's thread, which runs no tensor op (scheduler.py)
        outside = [t for t in ids if not 0 <= t < vocab_size]
    if outside:
        raise InvalidArgument(field, f"token id {int(outside[0])} is outside the vocabulary [0, {vocab_size})")


def _q_tensors(round_: RoundInput, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate each declared q and pad them to [k, S] tensors (padding: id 0, probability 0)."""
    k = len(round_.tokens)
    if len(round_.q_token_ids) != k or len(round_.q_probs) != k:
        raise InvalidArgument("round.nodes.q", "every node needs its q")
    width = max((len(ids) for ids in round_.q_token_ids), default=1)
    q_ids = torch.zeros((k, width), dtype=torch.long)
    q_probs = torch.zeros((k, width), dtype=torch.float32)
    for i, (token, ids, probs) in enumerate(zip(round_.tokens, round_.q_token_ids, round_.q_probs)):
        # Checked as tensors: a sampled q has thousands of entries (a Python loop over them cost
        # ~1 ms per node).
        field = f"round.nodes[{i}].q"
        if not ids or len(ids) != len(probs):
            raise InvalidArgument(field, "token_ids and probs must be non-empty and of equal length")
        ids_t, probs_t = torch.tensor(ids, dtype=torch.long), torch.tensor(probs, dtype=torch.float64)
        _check_ids(ids_t, vocab_size, f"{field}.token_ids")
        if torch.unique(ids_t).numel() != len(ids):
            raise InvalidArgument(f"{field}.token_ids", "token ids must be distinct")
        if not bool((probs_t.isfinite() & (probs_t >= 0) & (probs_t <= 1)).all()):
            raise InvalidArgument(f"{field}.probs", "probabilities must be finite and in [0, 1]")
        total = float(probs_t.sum())
        if abs(total - 1.0) > Q_SUM_TOLERANCE:
            raise InvalidArgument(f"{field}.probs", f"q is not a distribution: it sums to {total:.6f}")
        drafted = ids_t == token
        if not bool(drafted.any()) or float(probs_t[drafted].max()) <= 0:
            raise InvalidArgument(field, f"q gives no probability to its drafted token {token}")
        q_ids[i, : len(ids)] = ids_t
        q_probs[i, : len(probs)] = probs_t.float()
    return q_ids, q_probs


class SessionTable:
    """Open sessions against two limits, RESOURCE_EXHAUSTED past either: their number, and the
    tokens their KV caches hold (max_kv_tokens = the KV memory limit / kv_bytes_per_token).

    A new session is admitted only if its prompt fits with `headroom_tokens` to spare for every
    open session (itself included), so running sessions can keep growing after a refusal; a
    running session's round is refused only when its own growth would pass the hard limit.
    """

    def __init__(self, max_sessions: int, max_kv_tokens: int = 0, headroom_tokens: int = 0, retry_after_ms: int = 1000) -> None:
        self.max_sessions = max_sessions
        self.max_kv_tokens = max_kv_tokens  # 0: no limit
        self.headroom_tokens = headroom_tokens
        self.retry_after_ms = retry_after_ms
        self.open = 0
        self.sessions: set[Session] = set()

    def kv_tokens(self) -> int:
        """Tokens the open sessions' caches hold (committed tokens; in-flight trees aside)."""
        return sum(len(s.tokens) for s in list(self.sessions))

    def reserve(self, prompt_tokens: int = 0) -> None:
        if self.open >= self.max_sessions:
            raise ResourceExhausted(
                "open",
                f"this verifier already serves {self.open} sessions (its limit); retry in {self.retry_after_ms} ms or use another verifier",
                retry_after_ms=self.retry_after_ms,
            )
        if self.max_kv_tokens:
            needed = self.kv_tokens() + prompt_tokens + self.headroom_tokens * (self.open + 1)
            if needed > self.max_kv_tokens:
                raise ResourceExhausted(
                    "open",
                    f"KV memory: {needed} tokens (open sessions, this prompt and headroom) exceed this verifier's {self.max_kv_tokens}; "
                    f"retry in {self.retry_after_ms} ms or use another verifier",
                    retry_after_ms=self.retry_after_ms,
                )
        self.open += 1

    def add(self, session: Session) -> None:
        self.sessions.add(session)

    def check_round(self, session: Session, prepared: PreparedRound) -> None:
        """Refuse a round whose tree would take the caches past max_kv_tokens."""
        if self.max_kv_tokens and self.kv_tokens() + len(prepared.tree) + 1 > self.max_kv_tokens:
            raise ResourceExhausted(
                "round",
                f"KV memory: this round's {len(prepared.tree)} nodes would pass this verifier's limit of {self.max_kv_tokens} tokens; "
                f"retry in {self.retry_after_ms} ms",
                retry_after_ms=self.retry_after_ms,
            )

    def release(self, session: Session | None = None) -> None:
        self.open -= 1
        self.sessions.discard(session)  # type: ignore[arg-type]
