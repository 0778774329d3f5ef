"""The exact acceptance rule for one round's token tree of drafted tokens.

Pure functions over tensors: no model, cache or RPC. Words as in vLLM's rejection sampler:
drafted tokens are *accepted* or rejected; where the walk down the tree stops at a rejection, a
*recovered* token is sampled from the residual distribution; a path accepted down to a leaf
earns a *bonus* token sampled from the leaf's row. A chain is a tree with one child per node.

Draft distributions q arrive sparse: row i lists the support of q_i (token ids) and its
probabilities, padded to a common width S with probability-0 entries whose ids mean nothing
(and may repeat a real id of the same row). A deterministic drafter declares a point mass:
S = 1, ids = [token], probs = [1.0].

Three walks: greedy (the argmax), speculative sampling (Leviathan's rule over a tree), and the
exponential race (verify_coupled: a seeded session's output independent of the drafts).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import torch

from verifier_svc.sampling import greedy_tokens, sample_token
from verifier_svc.token_tree import ROOT, TokenTree

if TYPE_CHECKING:
    from verifier_svc.logprobs import TokenLogprob

# Below float32's resolution of 1.0 a residual max(p - q, 0) is rounding noise, not a
# distribution: it is that small only when p == q up to rounding, where rejection has
# (nearly) zero probability; we then sample from p itself.
MIN_RESIDUAL_MASS = torch.finfo(torch.float32).eps
_TINY = torch.finfo(torch.float32).tiny


class AcceptanceRule(Protocol):
    """The pluggable piece of the walk: how a child that the exact ratio rejected is judged.

    Every rule here is Algorithm 1 with q scaled: child x, tried against p (its parent's row, or
    what earlier siblings' rejections left of it), is accepted with probability
    min(1, p(x) / (a q(x))), and on rejection the walk continues with norm(max(p - b q, 0)).
    The exact rule is a = b = 1; a lossy rule has a <= 1, so it accepts at least whenever the
    exact rule does, and the walk asks it only after the exact ratio has rejected (its search,
    if any, is skipped when the cheap exact rule already accepts). See lossy_acceptance.py.
    """

    @property
    def name(self) -> str: ...

    def scales(self, p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, tried: int) -> tuple[float, float]:
        """(a, b) for a child tried `tried`-th (0: first) at its node against p [vocab], whose
        sparse q is (q_ids [S], q_probs [S]). Requires 0 < a <= 1."""
        ...


class ExactRule:
    """Exact speculative sampling: a = b = 1 (the output is distributed exactly as p)."""

    name = "exact"

    def scales(self, p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, tried: int) -> tuple[float, float]:
        return 1.0, 1.0


EXACT = ExactRule()


@dataclass(frozen=True)
class RoundVerdict:
    """What the target decided about one round's token tree of n nodes."""

    accepted_nodes: list[int]  # the accepted root-to-node path, as node indices (a chain: 0..m-1)
    next_token: int  # recovered token (after a rejection) or bonus token (after a leaf)
    is_bonus: bool  # True iff the accepted path ends at a leaf (for a chain: all drafts accepted)
    # [n] float32 for EVERY node: min(1, p(x) / q(x)) with p the target's distribution after the
    # node's path (not the residual left by siblings tried before it); greedy: 1.0 where x is
    # the argmax there, else 0.0; the exponential race: race_agreement.
    acceptance_probs: torch.Tensor
    # The emitted tokens' logprobs (logprobs.py), where the session asks for them.
    logprobs: list[TokenLogprob] = field(default_factory=list)

    @property
    def num_accepted(self) -> int:
        return len(self.accepted_nodes)


def verify_greedy(target_logits: torch.Tensor, tree: TokenTree) -> RoundVerdict:
    """Greedy verification of a token tree (Appendix A of Stratos, after Stern et al.).

    target_logits [n+1, vocab]: row 0 scores the position after the root, row i+1 the position
    after node i. From the root, walk to the child whose token is the argmax there (the first
    such child when siblings repeat a token); the next token is the argmax where the walk stops.
    At each node at most one token is acceptable, so this finds the longest accepted path.
    """
    assert target_logits.shape[0] == len(tree) + 1, "need one target row per node plus one for the root"
    return _walk(greedy_tokens(target_logits), tree)


def verify_coupled(
    target_probs: torch.Tensor, tree: TokenTree, draft_q_ids: torch.Tensor, draft_q_probs: torch.Tensor, exps: torch.Tensor,
) -> RoundVerdict:
    """Draft-invariant exact verification of a token tree by the exponential race
    (specdec/coupled_sampling.py, after Daliri, Musco and Suresh, 2024).

    target_probs [n+1, vocab] as for verify_speculative; exps [n+1, vocab]: row r's Exp(1)
    variables, a function of the session's seed and row r's position only. The target's token at
    row r is its race winner argmax(p_r / E_r); the walk is the greedy walk with the winners in
    place of the argmax. Each emitted token is distributed exactly as p at its position (given
    the earlier ones), and the emitted tokens depend on the exps and target_probs only, not on
    the tree: plain decoding with the same exps emits the same. Draws no other randomness.
    acceptance_probs, the drafter's labels, are the race's own: race_agreement (draft_q_ids,
    draft_q_probs: the sparse q as for verify_speculative).
    """
    assert target_probs.shape == exps.shape and target_probs.shape[0] == len(tree) + 1, "need one row of p and exps per node plus one"
    walked = _walk(torch.argmax(target_probs.double() / exps, dim=-1), tree)
    return replace(walked, acceptance_probs=race_agreement(target_probs, tree, draft_q_ids, draft_q_probs).float())


def race_agreement(target_probs: torch.Tensor, tree: TokenTree, draft_q_ids: torch.Tensor, draft_q_probs: torch.Tensor) -> torch.Tensor:
    """[n] for every node's token x, p its parent's row: the probability that the target's race
    winner there is x, given that x is q's race winner (the same Exp(1) variables E_v):
    1 / sum_v max(p(v) q(x) / p(x), q(v)); 0 where p(x) = 0 or q(x) = 0.

    The race's counterpart of min(1, p/q), never above it: both winners are x iff
    E_v >= E_x max(p(v) / p(x), q(v) / q(x)) for every v, which given E_x = t has probability
    exp(-t (sum_v max(...) - 1)); integrating over t ~ Exp(1) gives 1 / sum_v max(...), and
    dividing by P(q's winner is x) = q(x) gives the above. For a chain node (q's winner) it is
    what the race accepts it with; a point mass gets p(x)."""
    p = target_probs[tree.parents + 1].double()  # [n, vocab]
    q = torch.zeros_like(p).scatter_add_(1, draft_q_ids, draft_q_probs.double())  # padding adds 0
    p_x = p.gather(1, tree.tokens.unsqueeze(1))  # [n, 1]
    q_x = q.gather(1, tree.tokens.unsqueeze(1))
    drawable = (p_x > 0) & (q_x > 0)
    total = torch.maximum(p * (q_x / p_x.where(drawable, 1.0)), q).sum(1, keepdim=True)
    return torch.where(drawable, 1.0 / total, 0.0).squeeze(1)


def _walk(chosen: torch.Tensor, tree: TokenTree) -> RoundVerdict:
    """The greedy walk over `chosen` [n+1], the one acceptable token per row; acceptance_probs
    1.0 where a node's token is the one chosen at its parent, else 0.0."""
    matches = tree.tokens == chosen[tree.parents + 1]  # [n]
    path: list[int] = []
    node = ROOT
    while (child := next((c for c in tree.children_of(node) if matches[c]), None)) is not None:
        path.append(child)
        node = child
    return RoundVerdict(path, int(chosen[node + 1]), not tree.children_of(node), matches.float())


def _ratios(target_probs: torch.Tensor, tree: TokenTree, q_x: torch.Tensor) -> torch.Tensor:
    """[n] min(1, p(x) / q(x)) for every node's token x, p its parent's row, q_x [n] from
    _q_of_tokens; p(x) = 0 (e.g. x outside top-k) gives 0."""
    p_x = target_probs[tree.parents + 1].gather(1, tree.tokens.unsqueeze(1)).squeeze(1)  # [n]
    return (p_x / q_x).clamp_max_(1.0)


def _q_of_tokens(tree: TokenTree, draft_q_ids: torch.Tensor, draft_q_probs: torch.Tensor) -> torch.Tensor:
    """[n] q(x) for every node's token x: the sum over its support entries equal to x, so padding
    (probability 0) adds nothing even when its id repeats x. q(x) = 0 cannot be drawn from q;
    the floor (the smallest normal float32) only keeps a division by it finite."""
    return draft_q_probs.where(draft_q_ids == tree.tokens.unsqueeze(1), 0.0).sum(1).clamp_min(_TINY)


def verify_speculative(
    target_probs: torch.Tensor,
    tree: TokenTree,
    draft_q_ids: torch.Tensor,
    draft_q_probs: torch.Tensor,
    generator: torch.Generator,
    rule: AcceptanceRule = EXACT,
) -> RoundVerdict:
    """Multi-draft iterative speculative sampling over a token tree (Stratos, section 2.1, after
    SpecInfer); on a chain it is Algorithm 1 of Leviathan et al.

    target_probs [n+1, vocab]: standardized p, row 0 after the root, row i+1 after node i.
    draft_q_ids [n, S] int64 and draft_q_probs [n, S] float32: the sparse q node i's token was
    drawn from (padding has probability 0). From the root: try the children in random order,
    accepting child x with probability min(1, p(x) / q(x)); after each rejection replace p by
    norm(max(p - q, 0)); move to the first accepted child and repeat with its own row. When no
    child is accepted, the recovered token is sampled from what is left of p; after a leaf the
    bonus token is sampled from the leaf's row. n may be 0 (plain sampling from row 0).

    The emitted tokens are distributed exactly as sampling from p whenever siblings are
    independent draws from the q they declare (repeated tokens included) or point masses.
    Randomness comes only from `generator`, in a fixed order per visited node: one randperm
    when it has several children, one torch.rand(()) per child tried, and at the end one
    sample_token (sampling.py). The same generator state gives the same verdict.

    `rule` (default: exact) judges a child that u >= min(1, p/q) rejected: accepted iff
    u < min(1, p(x) / (a q(x))), else p becomes norm(max(p - b q, 0)); see AcceptanceRule. A
    rule with a = b = 1 gives verdicts identical to the exact rule's, bit for bit and with the
    same generator state, since it draws no randomness of its own. acceptance_probs stay the
    exact rule's min(1, p/q) whatever the rule (a lossy rule accepts at least that often).
    """
    n = len(tree)
    assert target_probs.shape[0] == n + 1, "need one target row per node plus one for the root"
    assert draft_q_ids.shape == draft_q_probs.shape and draft_q_ids.shape[0] == n, "q must be [n, S]"

    q_x = _q_of_tokens(tree, draft_q_ids, draft_q_probs)  # [n]
    acceptance = _ratios(target_probs, tree, q_x)  # [n] min(1, p(x) / q(x))
    tokens, acceptance_list, q_x_list = tree.tokens.tolist(), acceptance.tolist(), q_x.tolist()
    path: list[int] = []
    node = ROOT
    while True:
        children = tree.children_of(node)
        p = target_probs[node + 1]  # [vocab], the distribution after `node`'s path
        if not children:
            next_token = sample_token(p, generator)
            return RoundVerdict(path, next_token, True, acceptance.float())
        if len(children) > 1:
            children = tuple(children[j] for j in torch.randperm(len(children), generator=generator).tolist())
        accepted = None
        for tried, child in enumerate(children):
            # min(1, p/q) under what is left of p (the first child sees p itself).
            ratio = acceptance_list[child] if tried == 0 else min(1.0, float(p[tokens[child]]) / q_x_list[child])
            # child accepted iff u < min(1, p/q), u ~ U[0, 1): probability exactly min(1, p/q).
            u = float(torch.rand((), generator=generator, dtype=p.dtype))
            if u < ratio:
                accepted = child
                break
            # min(1, p/(a q)) = min(1, ratio / a) for a <= 1; a = 1 (exact) cannot accept here.
            a, b = rule.scales(p, draft_q_ids[child], draft_q_probs[child], tried)
            if a < 1.0 and u < min(1.0, ratio / a):
                accepted = child
                break
            p = _residual(p, draft_q_ids[child], draft_q_probs[child], b)
        if accepted is None:
            # sample_token normalizes p itself.
            next_token = sample_token(p, generator)
            return RoundVerdict(path, next_token, False, acceptance.float())
        path.append(accepted)
        node = accepted


def _residual(p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """norm(max(p - scale * q, 0)) for a normalized [vocab] p and a sparse q; p itself when that
    residual has no mass to speak of (see MIN_RESIDUAL_MASS). Subtracting q with index_add sums
    repeated ids, so padding never overwrites a real entry. scale = 1 is the exact rule's."""
    residual = p.index_add(0, q_ids, q_probs.to(p.dtype), alpha=-scale).clamp_min_(0.0)
    mass = float(residual.sum())
    return residual / mass if mass > MIN_RESIDUAL_MASS else p
