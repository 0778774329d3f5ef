"""Grammar-aware drafting for a constrained generation (torch-free): the drafter's own matcher
at the committed tokens, the grammar's forced tokens, and drafts fitted to the grammar before
they are sent.

- `guide(forced)`: the matcher for a model drafter to draft along (draft_guide.py): its chain
  drawn from q masked to the grammar, the tokens forced after each drawn token appended free.
- `forced(limit)`: the tokens the grammar forces next (llguidance's fast-forward tokens: the
  canonical tokens of the bytes every continuation starts with), drafted as point masses without
  the drafter: JSON punctuation and the keys of a fixed schema cost no drafting at all.
- `extend(draft, depth, max_nodes)`: the tokens forced after the draft's first chain, appended
  below it as point masses (a closing quote drafted, then the next key for free).
- `fit(draft)`: a point-mass node whose token the grammar does not allow after its path is cut
  with its subtree (a deterministic draft cut deterministically is still a deterministic draft).
  A sampled node's q is restricted to the allowed tokens and renormalized (q'); its token is kept
  if allowed, else redrawn from q' (then its subtree, drafted after the old token, is cut); a
  node whose q has no allowed token is cut. Kept-if-allowed-else-redrawn is a draw from q'
  exactly (P(x) = q(x) + (1 - Z) q(x) / Z = q(x) / Z), so every sent node declares the
  distribution it was drawn from, and siblings stay independent draws.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import llguidance
import numpy as np

from drafter_svc.draft_guide import DraftGuide
from drafter_svc.draft_tree import primary_path
from drafter_svc.draft import ROOT, Draft
from specdec.grammar import GrammarCompiler
from specdec.tokenizer import Tokenizer


@functools.cache
def compiler_for(tokenizer: Tokenizer) -> GrammarCompiler:
    """The process's compiler (and its cache of compiled constraints) for the served tokenizer."""
    return GrammarCompiler(tokenizer.to_json(), tokenizer.eos_token_ids, tokenizer.vocab_size)


class GrammarDrafts:
    def __init__(self, compiler: GrammarCompiler, matcher: llguidance.LLMatcher, eos_token_ids: frozenset[int], seed: int | None) -> None:
        self.compiler = compiler
        self.matcher = matcher
        self.eos_token_ids = eos_token_ids
        self.rng = np.random.default_rng(seed)

    def forced(self, limit: int) -> list[int]:
        """Up to `limit` tokens the grammar forces after the committed tokens (no EOS)."""
        if limit <= 0 or self.matcher.is_stopped():
            return []
        forced = self.matcher.compute_ff_tokens()[:limit]
        end = next((i for i, t in enumerate(forced) if t in self.eos_token_ids), len(forced))
        return forced[:end]

    def guide(self, forced: list[int]) -> DraftGuide:
        """A model drafter's guide (draft_guide.py) for a chain drafted after the committed
        tokens and the round's `forced` tokens; release it before the matcher is used again."""
        if forced and not self.matcher.consume_tokens(forced):
            raise RuntimeError(f"the drafter's grammar matcher refused its forced tokens {forced}: {self.matcher.get_error()}")
        return DraftGuide(self.matcher, self.compiler.allowed_tokens, self.eos_token_ids, len(forced))

    def fit(self, draft: Draft) -> Draft:
        """The draft with every node allowed by the grammar after its path (module docstring)."""
        n = len(draft)
        if not n:
            return draft
        children: list[list[int]] = [[] for _ in range(n + 1)]
        for i, parent in enumerate(draft.parents):
            children[parent + 1].append(i)
        kept: dict[int, tuple[int, list[int], list[float]]] = {}  # node -> (token, q ids, q probs)
        # Depth-first; a frame is (node, entered): entered means its token was consumed on the way down.
        stack: list[tuple[int, bool]] = [(c, False) for c in reversed(children[0])]
        while stack:
            node, entered = stack.pop()
            if entered:
                self.matcher.rollback(1)
                continue
            fitted = self._fit_node(draft, node)
            if fitted is None:
                continue
            kept[node] = fitted
            token = fitted[0]
            if token != draft.token_ids[node] or token in self.eos_token_ids:
                continue  # redrawn (its subtree followed the old token) or the end: no children
            if not self.matcher.consume_token(token):
                raise RuntimeError(f"the drafter's grammar matcher refused allowed token {token}: {self.matcher.get_error()}")
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children[node + 1]))
        return _select(draft, kept)

    def _fit_node(self, draft: Draft, node: int) -> tuple[int, list[int], list[float]] | None:
        """(token, q ids, q probs) of the node fitted at the matcher's state, or None: cut."""
        token, ids, probs = draft.token_ids[node], draft.q_token_ids[node], draft.q_probs[node]
        if len(ids) == 1:
            return (token, ids, probs) if self._allows([token])[0] else None
        allowed = self._allows(ids)
        masked = np.where(allowed, np.asarray(probs, dtype=np.float64), 0.0)
        mass = masked.sum()
        if mass <= 0:
            return None
        q = masked / mass
        keep = np.flatnonzero(q > 0)
        q_ids, q_probs = [int(ids[i]) for i in keep], [float(q[i]) for i in keep]
        if token not in q_ids:
            token = int(self.rng.choice(q_ids, p=np.asarray(q_probs) / sum(q_probs)))
        return token, q_ids, q_probs

    def _allows(self, ids: Sequence[int]) -> np.ndarray:
        if len(ids) == 1:
            return np.array([self.matcher.validate_tokens([ids[0]]) == 1])
        return self.compiler.allowed_tokens(self.matcher)[np.asarray(ids)]

    def extend(self, draft: Draft, depth: int, max_nodes: int) -> Draft:
        """The draft with the tokens the grammar forces after its primary path (its first chain)
        appended below that path's end, keeping the tree within `depth` and `max_nodes`. The
        draft must fit the grammar (`fit`)."""
        path = primary_path(draft)
        room = min(depth - len(path), max_nodes - len(draft))
        if room <= 0 or any(draft.token_ids[i] in self.eos_token_ids for i in path):
            return draft
        tokens = draft.path_tokens(path)
        if not self.matcher.consume_tokens(tokens):
            raise RuntimeError(f"the drafter's grammar matcher refused a fitted path: {self.matcher.get_error()}")
        extra = self.forced(room)
        self.matcher.rollback(len(tokens))
        return graft_below(draft, path[-1] if path else ROOT, extra)

    def commit(self, emitted: Sequence[int]) -> None:
        """The round's emitted tokens, up to an EOS, advance the matcher."""
        for token in emitted:
            if token in self.eos_token_ids or self.matcher.is_stopped():
                return
            if not self.matcher.consume_token(token):
                raise RuntimeError(f"the drafter's grammar matcher refused emitted token {token}: {self.matcher.get_error()}")


def _select(draft: Draft, kept: dict[int, tuple[int, list[int], list[float]]]) -> Draft:
    """The kept nodes in node order, with their fitted tokens and q (each kept node's parent is kept)."""
    order = sorted(kept)
    index = {old: new for new, old in enumerate(order)}

    def pick(values: list) -> list:  # type: ignore[type-arg]
        return [values[i] for i in order] if values else []

    return Draft(
        [kept[i][0] for i in order],
        [ROOT if draft.parents[i] == ROOT else index[draft.parents[i]] for i in order],
        [kept[i][1] for i in order],
        [kept[i][2] for i in order],
        pick(draft.match_lengths),
        pick(draft.confidences),
        [] if any(kept[i][1] != draft.q_token_ids[i] for i in order) else pick(draft.q_entropies),
    )


def graft_below(draft: Draft, node: int, chain: list[int]) -> Draft:
    """The draft with `chain` (point masses) hanging below `node` (ROOT: the context)."""
    if not chain:
        return draft
    n = len(draft)
    parents = [node, *range(n, n + len(chain) - 1)]

    def joined(values: list, fill: object) -> list:  # type: ignore[type-arg]
        return values + [fill] * len(chain) if values else []

    return Draft(
        draft.token_ids + chain, draft.parents + parents, draft.q_token_ids + [[t] for t in chain], draft.q_probs + [[1.0] for _ in chain],
        joined(draft.match_lengths, 0), joined(draft.confidences, 1.0), joined(draft.q_entropies, 0.0),
    )


def graft(forced: list[int], rest: Draft) -> Draft:
    """The forced tokens as a chain of point masses, with `rest` (drafted after them) below the last."""
    if not forced:
        return rest
    f = len(forced)
    head = Draft.point_masses(forced)
    parents = [f - 1 if p == ROOT else p + f for p in rest.parents]

    def joined(values: list, fill: object) -> list:  # type: ignore[type-arg]
        return [fill] * f + values if values else []

    return Draft(
        head.token_ids + rest.token_ids, head.parents + parents, head.q_token_ids + rest.q_token_ids, head.q_probs + rest.q_probs,
        joined(rest.match_lengths, 0), joined(rest.confidences, 1.0), joined(rest.q_entropies, 0.0),
    )
