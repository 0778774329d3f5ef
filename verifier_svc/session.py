"""One generation session on the verifier: its tokens, KV cache, sampling settings and RNG.

Each round is ONE target pass over the tokens not yet cached (the last committed token, or the
whole prompt on the first round) plus the round's token tree; the exact rule (acceptance.py)
then walks the tree, and the cache keeps only the committed prefix and the accepted path. A
session may opt into a lossy rule instead (lossy_acceptance.py: lenient or mentored). The rule
runs on the target's logits after the session's output rules (output_rules.py: a constraint's
masks and penalties, every tree node from its own path). A round arrives as a RoundInput and is
validated into a PreparedRound (round_input.py).

A plain session (its drafter said it sends only empty rounds) may have its next one-token pass run
before its round arrives, while the verdict travels (run_ahead, called by the scheduler when it is
idle): the same pass on the same cache, so the same logits; an empty round then takes them, a
round with nodes drops them and the entry, and has its own pass.
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch

from specdec.acceptance_params import AcceptanceParams
from specdec.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from specdec.grammar import GrammarCompiler
from specdec.sampling_params import SamplingParams
from specdec.coupled_sampling import RaceNoise, race_seed
from verifier_svc.acceptance import RoundVerdict, verify_coupled, verify_greedy, verify_speculative
from verifier_svc.kv_cache import PromptEntries
from verifier_svc.lossy_acceptance import make_rule, verify_greedy_lenient
from verifier_svc.output_rules import OutputOptions, OutputRules
from verifier_svc.prefix_cache import PrefixCache
from verifier_svc.target_model import TargetModel
from verifier_svc.round_input import Limits, PreparedRound, RoundInput, check_ids, checked_tree, q_tensors
from verifier_svc.token_tree import TokenTree, chain

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
        plain: bool = False,
        return_prompt_cache: bool = False,
    ) -> None:
        """`plain`: the drafter's hint that every round will be empty (its next pass may run ahead).
        `return_prompt_cache`: the drafter asked for the prompt's entries (take_prompt_entries)."""
        if not prompt:
            raise InvalidArgument("open.prompt_token_ids", "must not be empty")
        if len(prompt) >= limits.context_length:
            raise InvalidArgument(
                "open.prompt_token_ids",
                f"{len(prompt)} tokens leave no room in the context length of {limits.context_length}",
            )
        check_ids(prompt, target.vocab_size, "open.prompt_token_ids")
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
        self.plain = plain
        # Whether a round reads only its rows' argmax: greedy, exact, logits unchanged and no
        # logprobs (a pass may then leave out tokens that cannot be the argmax: TargetModel.score).
        self.argmax_only = sampling.greedy and acceptance.rule != "lenient" and not self.output.shapes_logits and not output.logprobs
        # [1, vocab] logits after the last committed token, whose entry the cache then holds,
        # scored before its round arrived (run_ahead); written on the target's thread only.
        self.ahead: torch.Tensor | None = None
        # The prompt's length while the drafter that asked for its keys and values has not had them.
        self.prompt_cache_tokens = len(prompt) if return_prompt_cache else 0

    def verify(self, round_: RoundInput) -> RoundVerdict:
        """Run one round: one target pass over the tree, the acceptance walk, the cache cut
        down to the committed prefix plus the accepted path."""
        prepared = self.prepare(round_)
        logits = prepared.ahead if prepared.ahead is not None else self.target.score(self.cache, prepared.pending, prepared.tree, self.argmax_only)
        return self.finish(prepared, logits)

    def prepare(self, round_: RoundInput) -> PreparedRound:
        """Validate a round (InvalidArgument / FailedPrecondition naming the problem) and
        return what its target pass needs; touches no state but the cache's stored prefix, which
        the first call copies in (restore_prefix). A batched pass (batched_pass.py)
        scores several sessions' prepared rounds at once."""
        if self.closed:
            raise FailedPrecondition("round", "the session has ended")
        self.restore_prefix()
        tree = checked_tree(round_, self.limits, self.target.vocab_size)
        if len(self.tokens) + tree.depth() + 1 > self.limits.context_length:
            raise InvalidArgument(
                "round.nodes",
                f"{len(self.tokens)} tokens + a tree of depth {tree.depth()} + 1 exceed the context length of {self.limits.context_length}",
            )
        q_ids, q_probs = q_tensors(round_, self.target.vocab_size)
        if self.ahead is not None and len(tree):  # it drafted after all: its pass covers the root again
            self.drop_ahead()
        start = len(self.cache)
        return PreparedRound(round_, tree, q_ids, q_probs, start, self.tokens[start:], self.ahead)

    def run_ahead(self) -> bool:
        """Score the last committed token now, before the round that asks for it: its logits go
        to `ahead`, its entry into the cache. Returns whether a pass ran: only for a plain, open
        session whose cache holds all but that token (so none ran ahead yet) and whose next round
        fits in the context. Runs on the target's thread."""
        cache = self.cache  # the stream's close may drop it meanwhile; this pass then scores for nobody
        if not self.plain or self.closed or cache is None or len(self.tokens) - len(cache) != 1:
            return False
        if len(self.tokens) >= self.limits.context_length:
            return False
        self.ahead = self.target.score(cache, self.tokens[-1:], chain([]), self.argmax_only)
        return True

    def drop_ahead(self) -> None:
        """Forget the logits scored ahead and their cache entry (a failed pass: whatever it wrote)."""
        self.ahead = None
        if self.cache is not None and len(self.cache) >= len(self.tokens):
            self.cache.truncate(len(self.tokens) - 1)

    def restore_prefix(self) -> None:
        """Copy the stored prompt prefix found when the session opened into its cache (once;
        prepare() does it, so the copy runs on the thread that runs the target)."""
        if self._stored_prefix is not None:
            self._stored_prefix.fill(self.cache)
            self._stored_prefix = None

    def take_prompt_entries(self) -> PromptEntries | None:
        """The prompt's keys and values (KVCache.prompt_entries) for a session opened with
        return_prompt_cache, once, after its first round (the cache then holds the whole prompt);
        None where they cannot be given. No pass may run on the session meanwhile: the servicer
        calls it before it reads the session's next round or lets a pass run ahead."""
        length, self.prompt_cache_tokens = self.prompt_cache_tokens, 0
        cache = self.cache
        return cache.prompt_entries(length) if length and cache is not None and len(cache) >= length else None

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
        self.ahead = None  # taken (prepare dropped one that a tree's pass would cover again)
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
