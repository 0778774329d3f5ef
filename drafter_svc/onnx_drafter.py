"""A model drafter: a small (or quantized) language model under onnxruntime, sampling drafts and
sending the q each was drawn from (Leviathan et al., 2023: any q works; a good q is close to p).

Each session keeps its own KV cache (draft_cache.py) and the tokens it holds, over the process's
shared model (draft_model.py). Each propose runs the context through the model from the longest
cached prefix it shares with the cache (so after the verifier rejects, the cache is rolled back
to the accepted text by shortening it, and drafted tokens that were accepted are not run again), then
drafts a chain of `budget` tokens, one model call per token, each sampled from its sparse q
(draft_sampling.py), or fewer where the session's draft policy, asked before each call, says
the next token would not pay for its step (`keep_drafting`; docs/concepts/draft-length-policies.md).
With more nodes than the budget, siblings are added at the first depths: independent draws
from the same q as the chain's node there (the exactness condition of the verifier's tree rule,
verifier_svc/acceptance.py; repeats included), or at temperature 0 the next most likely tokens
as point masses. Siblings are leaves: they cost no model call. At temperature 0 each node also
carries the model's softmax probability of its token (Draft.confidences), the evidence the
acceptance predictor has where q is a point mass. A seeded session under the exact
rule draws by the exponential race instead (specdec/coupled_sampling.py): a chain token is q's
race winner at its position, its siblings the runners-up (distinct), which the verifier's race
then accepts whenever its own winner is among them. Under a constraint, `propose` is given the
grammar along its chain (draft_guide.py): each q is computed from logits masked to the grammar,
and the tokens the grammar forces after a drawn token join the chain as point masses, read by
the next model call with the drawn token instead of costing a step each.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from drafter_svc.chain_draft import BRANCH_DEPTHS, NodeQ, draft_of, node_q, siblings_per_depth
from drafter_svc.draft import ROOT, Draft, Feedback
from drafter_svc.draft_cache import IN_PLACE, MIN_SPARE_SLOTS, DraftCache
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.draft_model import DraftModel, causal_bias
from drafter_svc.draft_sampling import TAIL_MASS, SparseQ, draft_distribution, model_probabilities, point_mass, top_tokens
from drafter_svc.drafter import Drafter, KeepDrafting
from drafter_svc.prompt_cache import Reuse, shared_length
from specdec.coupled_sampling import RaceNoise, race_ranking
from specdec.sampling_params import SamplingParams
from specdec.v1.verifier_pb2 import PromptCache

# The prompt tokens a model drafter reads, from the end: its prefill costs what the target's does,
# and `hybrid`'s copies read the whole context. The drafter sees the prompt's last PROMPT_WINDOW
# tokens plus everything generated; q is still what it samples from (exactness does not depend on
# what it reads). The lengths measured: docs/design/prompt-read-after-prefill.md.
PROMPT_WINDOW = 128

TIMED_RUN_TOKENS = 32  # model calls over this many tokens or more time the model's per-token seconds


class OnnxDrafter(Drafter):
    """One session's drafter over a shared DraftModel; samples with `sampling` from `rng`, q cut
    at `tail_mass` (draft_sampling.draft_distribution). It reads the context from `window` tokens
    before the end of the first context it is given (the prompt) on; 0: all of it. With
    `race_seed` (a seeded session that the verifier checks by the exponential race:
    specdec/coupled_sampling.py) a sampled token at a position is instead q's race winner there,
    and its siblings the runners-up.

    `keep_drafting`, when given to `propose`, is asked before each of its model calls (the first included)
    with the chain drafted so far, the model's `step_seconds` (the running mean of one-token
    steps, shared by the process's sessions) and, before the first call, what that call costs
    beyond a step: the tokens it must read first (the prompt window, when this drafter has not
    read it: `reads_prompt`) at the model's `token_seconds`. False ends the chain there (an empty
    draft before the first call). `guide`, when given, is the grammar at the context's end: the
    chain is drawn from masked q, with forced tokens free, and ends at an EOS.

    With `prompt_cache_tokens` > 0 its first read starts from what an earlier session of the
    process read of a prompt sharing its beginning, and is kept for later ones, in the model's
    PromptCache of that many tokens (prompt_cache.py); 0: every session reads its own. A model
    that is the target's copy takes the keys and values of a prompt of up to
    `prompt_from_verifier_tokens` tokens from the verifier instead (takes_prompt_cache)."""

    def __init__(
        self, model: DraftModel, sampling: SamplingParams, rng: np.random.Generator, tail_mass: float = TAIL_MASS,
        window: int = PROMPT_WINDOW, race_seed: int | None = None, prompt_cache_tokens: int = 0, prompt_from_verifier_tokens: int = 0,
    ) -> None:
        if not 0.0 <= tail_mass < 1.0:
            raise ValueError(f"tail_mass must be in [0, 1), got {tail_mass}")
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        if prompt_cache_tokens < 0:
            raise ValueError(f"prompt_cache_tokens must be >= 0, got {prompt_cache_tokens}")
        self.model = model
        self.sampling = sampling
        self.rng = rng
        self.tail_mass = tail_mass
        self.window = window
        self.prompt_cache_tokens = prompt_cache_tokens
        self.prompt_from_verifier_tokens = prompt_from_verifier_tokens
        self.race = RaceNoise(race_seed, model.manifest.vocab_size) if race_seed is not None and not sampling.greedy else None
        self._start: int | None = None  # where the tokens it reads begin in the session's context
        self._tokens: list[int] = []  # the tokens whose keys and values are in the cache, in order
        self._cache = model.empty_cache()
        self.model_calls = 0

    @property
    def drafts_with_a_model(self) -> bool:
        return True

    def next_logits(self, context: Sequence[int]) -> np.ndarray:
        """The draft model's logits [vocab] after `context`, reusing the cached prefix it shares
        (on a session's first read: what the prompt cache kept of a prompt sharing its beginning)."""
        context = self._read(context)
        first_read = not self._tokens
        if first_read and (kept := self._kept_prompt(context)) is not None:
            self._tokens, self._cache = list(context[: kept.tokens]), kept.cache
            if kept.logits is not None:
                return kept.logits
        shared = self._shared_prefix(context)
        self._truncate(shared)
        new = list(context[shared:])
        started = time.perf_counter()
        logits = self._extend(new, causal_bias(shared, len(new)))
        if len(new) >= TIMED_RUN_TOKENS:
            self.model.time_token((time.perf_counter() - started) / len(new))
        if first_read and self.prompt_cache_tokens:
            self.model.prompts.keep(context, self._cache, logits, self.prompt_cache_tokens)
        return logits

    def _kept_prompt(self, read: Sequence[int]) -> Reuse | None:
        return self.model.prompts.reuse(read) if self.prompt_cache_tokens else None

    def reads_all_of(self, prompt_tokens: int) -> bool:
        """Whether this drafter reads the whole of a prompt of `prompt_tokens` tokens: its window
        covers it (or it has none)."""
        return not self.window or prompt_tokens <= self.window

    def pending_tokens(self, context: Sequence[int]) -> int:
        """How many tokens the next model call after `context` runs (the whole prompt window for
        a drafter that has not read it yet, less what the prompt cache kept of it; 1 or 2 after
        a round)."""
        context = self._read(context)
        if not self._tokens and self.prompt_cache_tokens:
            return len(context) - self.model.prompts.reusable(context)
        return len(context) - self._shared_prefix(context)

    def _read(self, context: Sequence[int]) -> Sequence[int]:
        """The part of `context` this drafter reads: from the window's start on."""
        if not context:
            raise ValueError("the context must not be empty")
        if self._start is None:
            self._start = max(0, len(context) - self.window) if self.window else 0
        return context[min(self._start, len(context) - 1):]

    def _shared_prefix(self, context: Sequence[int]) -> int:
        return shared_length(self._tokens, context, len(context) - 1)  # the last token is always run: its logits are needed

    def takes_prompt_cache(self, prompt: Sequence[int]) -> bool:
        """A target's copy with nothing read yet takes a prompt of up to prompt_from_verifier_tokens
        tokens (that its positions cover) from the verifier, unless the prompt cache keeps its read."""
        return (
            self.model.manifest.is_target_copy and 0 < len(prompt) <= self.prompt_from_verifier_tokens and not self._tokens
            and self.model.positions_left(len(prompt)) >= 0 and self.pending_tokens(prompt) > 1
        )

    def adopt_prompt_cache(self, prompt: Sequence[int], cache: PromptCache) -> bool:
        """Hold the target's entries of the whole `prompt` (no window) where their shape is the
        model's and nothing is read yet: the next call runs only the tokens after it."""
        m = self.model.manifest
        if self._tokens or cache.tokens != len(prompt) or (cache.num_kv_heads, cache.head_dim, len(cache.keys)) != (m.num_kv_heads, m.head_dim, m.num_layers):
            return False
        spare = MIN_SPARE_SLOTS if m.cache == IN_PLACE else 0
        adopted = DraftCache.of_entries(cache.keys, cache.values, cache.dtype, m.num_kv_heads, m.head_dim, len(prompt), spare)
        if adopted is None:
            return False
        self._cache, self._tokens, self._start = adopted, list(prompt), 0
        if self.prompt_cache_tokens and self.reads_all_of(len(prompt)):  # a later session's read of it drafts at once
            self.model.prompts.keep(prompt[:-1], adopted, None, self.prompt_cache_tokens)
        return True

    def prefill(self, context: Sequence[int]) -> None:
        """Run `context` into the cache (e.g. the prompt, while the verifier runs its own
        prefill), so that the next propose after it runs only the tokens added since."""
        if context and self.model.positions_left(len(self._read(context))) >= 0:
            self.next_logits(context)

    def propose(
        self, context: Sequence[int], budget: int, max_nodes: int | None = None, keep_drafting: KeepDrafting | None = None,
        guide: DraftGuide | None = None,
    ) -> Draft:
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        nodes = budget if max_nodes is None else max_nodes
        if max_nodes is not None and max_nodes < 0:
            raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
        left = self.model.positions_left(len(self._read(context)))
        if left < 0:  # the context alone is past the model's positions: nothing to draft with
            return Draft.point_masses([])
        depth = min(budget, nodes, left + 1)  # the chain's last token is drawn, not run
        if self.race is not None:
            self.race.forget_before(len(context))
        chain: list[int] = []
        chain_q: list[SparseQ] = []
        qs: list[NodeQ] = []  # each node's q as a Draft carries it, converted once
        sure: list[float] = []  # greedy: the model's probability of each node's token (Draft.confidences)
        level_logits: list[np.ndarray | None] = []  # None: a token the grammar forced (no alternatives)
        read = 0  # chain tokens already in the cache
        while len(chain) < depth and not (guide is not None and guide.ended) and self._keep_drafting(keep_drafting, context, chain, qs, sure, depth, nodes):
            started = time.perf_counter()
            if chain:  # the last drawn token and any forced after it, in one call
                logits = self._extend(chain[read:], causal_bias(len(self._tokens), len(chain) - read))
            else:  # catches up on the tokens emitted since (a prefill, the first time)
                logits = self.next_logits(context)
            steps, read = len(chain) - read, len(chain)
            if guide is not None:
                logits = guide.mask(logits)
            q = draft_distribution(logits, self.sampling, self.tail_mass)
            chain.append(self._draw(q, len(context) + len(chain), 1)[0])
            if steps == 1:  # a step: the model call, q and the draw (bench/drafter_calls.py)
                self.model.time_step(time.perf_counter() - started)
            chain_q.append(q)
            qs.append(node_q(q))
            if self.sampling.greedy:
                sure.extend(model_probabilities(logits, chain[-1:]))
            level_logits.append(logits)
            for token in guide.advance(chain[-1], depth - len(chain)) if guide is not None else []:
                chain.append(token)
                chain_q.append(point_mass(token))
                qs.append(node_q(chain_q[-1]))
                sure.extend([1.0] if self.sampling.greedy else [])
                level_logits.append(None)
        if not chain:
            return Draft.point_masses([])
        token_ids, parents = list(chain), list(range(ROOT, len(chain) - 1))
        # The siblings the request's shape asks for, at the chain's first depths.
        for d, count in enumerate(siblings_per_depth(nodes - depth, min(len(chain), BRANCH_DEPTHS))):
            level = level_logits[d]
            if level is None:
                continue
            if self.sampling.greedy:
                alternatives = [point_mass(t) for t in top_tokens(level, count + 1)[1:] if np.isfinite(level[t])]
                drawn = [(int(a.token_ids[0]), a) for a in alternatives]
            elif self.race is not None:  # the runners-up: the race's own draws would repeat the winner
                drawn = [(t, chain_q[d]) for t in self._draw(chain_q[d], len(context) + d, count + 1)[1:]]
            else:
                drawn = [(chain_q[d].sample(self.rng), chain_q[d]) for _ in range(count)]
            for token, q in drawn:
                token_ids.append(token)
                parents.append(d - 1)  # the chain node at depth d (d - 1 is its parent's index)
                qs.append(node_q(q))
            if self.sampling.greedy:  # one softmax per depth for all of its siblings
                sure.extend(model_probabilities(level, [token for token, _ in drawn]))
        return draft_of(token_ids, parents, qs, sure)

    def _draw(self, q: SparseQ, position: int, count: int) -> list[int]:
        """`count` tokens for `position` (its index in the context): race winner and runners-up
        with a race (at most q's support), else independent draws from q."""
        if self.race is None:
            return [q.sample(self.rng) for _ in range(count)]
        return race_ranking(q.token_ids, q.probs, self.race.rows([position])[0], count)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn: the next context tells the cache where to roll back to."""

    def _keep_drafting(
        self, keep_drafting: KeepDrafting | None, context: Sequence[int], chain: list[int], qs: list[NodeQ], sure: list[float],
        depth: int, nodes: int,
    ) -> bool:
        if keep_drafting is None:
            return True
        partial = draft_of(list(chain), list(range(ROOT, len(chain) - 1)), qs, sure)
        catch_up = self.catch_up_seconds(context) if not chain else 0.0
        return keep_drafting(partial, depth, nodes, self.step_seconds, catch_up, self.reads_prompt and not chain)

    @property
    def reads_prompt(self) -> bool:
        """The next model call reads the session's prompt: nothing is in the cache yet."""
        return not self._tokens

    def catch_up_seconds(self, context: Sequence[int]) -> float:
        """What the first model call after `context` costs beyond one step: the tokens it reads
        (the prompt window, or those emitted since the last draft) but the one a step reads
        anyway, at the model's `token_seconds`. On this CPU one call of n = 3-16 tokens took a
        1-token call and 0.2-0.7 ms per token more (2 tokens: 1.1-1.3 ms more), after 150 and
        300 cached tokens; a prefill's token 0.68 ms (bench/drafter_calls.py,
        results/drafter_calls-20261125-graph2.md). (Priced as n tokens less a step, a catch-up of
        under ~10 tokens was free.)"""
        return max(0, self.pending_tokens(context) - 1) * self.model.token_seconds

    @property
    def step_seconds(self) -> float:
        return self.model.step_seconds

    def _extend(self, token_ids: list[int], bias: np.ndarray) -> np.ndarray:
        """The model's logits [vocab] after the last of `token_ids`, all of them run into the cache."""
        start = len(self._tokens)
        logits = self.model.run(token_ids, range(start, start + len(token_ids)), bias, self._cache, last_only=True)
        self._tokens += token_ids
        self.model_calls += 1
        return logits[-1]

    def _truncate(self, length: int) -> None:
        if length < len(self._tokens):
            self._cache.truncate(length)
            del self._tokens[length:]
