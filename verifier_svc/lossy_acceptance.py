"""Opt-in lossy acceptance rules: lenience and mentored decoding, plugged into the exact walk.

Pure rules over tensors, no model, cache or RPC. Both are Algorithm 1 with the draft's q scaled
(see acceptance.AcceptanceRule): child x, tried against p, is accepted with
min(1, p(x) / (a q(x))) and after a rejection the walk continues with norm(max(p - b q, 0)).
They change the output distribution by a bounded, stated amount, in exchange for more accepted
tokens; the exact rule (a = b = 1) stays the default.

- Lenience (Leviathan et al., appendix A.5), l in (0, 1]: a = b = l, i.e. Algorithm 1 run
  with l q in place of q. Guarantee: at every position, conditionally on everything emitted
  before, no token is emitted with more than 1 / l times its target probability p(x). Proof:
  the position emits pi = min(q, p / l) + (1 - beta) pi', beta = sum min(q, p / l), where pi'
  is what follows a rejection: for a chain, r = max(0, p - l q) / (1 - l beta); on a TREE, what
  the later siblings (judged leniently against r) emit, which is <= r / l by induction (the
  last step is a plain sample from r). Since (1 - beta) / (1 - l beta) <= 1, where l q <= p:
  pi <= q + (p - l q) / l = p / l, and where l q > p: r = 0 there and pi = p / l. So chains
  and trees share the guarantee, with point-mass or stochastic q (for a point mass q = [x],
  x is accepted with min(1, p(x) / l)). Nothing bounds pi from below: lenience may lose
  diversity.
- Lenience at temperature 0 (appendix A.5's variant): accept x iff p(x) >= l * max(p), with p
  the target's softmax at temperature 1 (before any standardization); the walk takes, at each
  node, the most likely acceptable child; the next token is the argmax, as in exact greedy.
  The guarantee is then that every emitted token has p(x) >= l * max(p) at its position.
- Mentored decoding (seed 002, mentored_decoding.py), KL budget D >= 0: the first child tried
  at a node gets the (alpha, gamma) of solve_mentored, the acceptance-maximizing rule with
  KL(pi || p) <= D for that child's q; the siblings tried after it are judged exactly against
  its residual, and exact multi-draft sampling from a residual emits exactly that residual. So
  at every position the emitted distribution is pi(first child's q), averaged over which child
  comes first (the walk's random order), and KL is convex in its first argument: on chains and
  trees alike, KL(emitted || p) <= D at every position, conditionally on the prefix. Point-mass
  q is the two-point case: x's probability rises from p(x) to the largest pi(x) with
  KL(pi || p) <= D, every other token is scaled down alike. At temperature 0 the target is a
  point mass, every other distribution is at infinite KL, so mentored decoding needs
  temperature > 0 (the session refuses it at temperature 0).

l = 1 and D = 0 are the exact rule (a = b = 1), bit for bit and with the same generator state.
"""

from __future__ import annotations

import torch

from specdec.acceptance_params import AcceptanceParams
from verifier_svc.acceptance import EXACT, AcceptanceRule, RoundVerdict, verify_greedy
from verifier_svc.mentored_decoding import solve_mentored
from verifier_svc.token_tree import ROOT, TokenTree


class LenientRule:
    """Leviathan et al.'s lenience l in (0, 1]: a = b = l for every child tried."""

    def __init__(self, lenience: float) -> None:
        assert 0.0 < lenience <= 1.0, "lenience must be in (0, 1]"
        self.lenience = lenience
        self.name = f"lenient:{lenience:g}"

    def scales(self, p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, tried: int) -> tuple[float, float]:
        return self.lenience, self.lenience


class MentoredRule:
    """Mentored decoding with KL budget D >= 0: the first child tried at a node gets
    solve_mentored's (alpha, gamma); later siblings are judged exactly (see the module doc)."""

    def __init__(self, max_kl: float) -> None:
        assert max_kl >= 0.0, "the KL budget must be >= 0"
        self.max_kl = max_kl
        self.name = f"mentored:{max_kl:g}"

    def scales(self, p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, tried: int) -> tuple[float, float]:
        if tried > 0 or self.max_kl == 0.0:
            return 1.0, 1.0
        solution = solve_mentored(p, q_ids, q_probs, self.max_kl)
        return solution.alpha, solution.gamma


def make_rule(params: AcceptanceParams) -> AcceptanceRule:
    """The sampled-mode rule of validated params (exact, lenient:l, mentored:D)."""
    if params.rule == "lenient":
        return LenientRule(params.parameter)
    if params.rule == "mentored":
        return MentoredRule(params.parameter)
    return EXACT


def verify_greedy_lenient(target_logits: torch.Tensor, tree: TokenTree, lenience: float) -> RoundVerdict:
    """Greedy verification with lenience (Leviathan et al., appendix A.5, temperature 0).

    target_logits [n+1, vocab] as in verify_greedy. Node x is acceptable iff p(x) >= l * max(p),
    p the softmax of its parent's row at temperature 1. From the root, walk to the most likely
    acceptable child (the first one on ties); the next token is the argmax where the walk stops.
    l = 1 is verify_greedy itself (acceptable iff x is THE argmax, ties to the lowest id).
    acceptance_probs are the exact rule's (1.0 where x is the argmax), as for sampled rules.
    """
    if lenience == 1.0:
        return verify_greedy(target_logits, tree)
    exact = verify_greedy(target_logits, tree)  # acceptance_probs and the argmax rows
    log_probs = target_logits.float().log_softmax(-1)  # [n+1, vocab]
    parent_rows = log_probs[tree.parents + 1]  # [n, vocab]
    log_p_x = parent_rows.gather(1, tree.tokens.unsqueeze(1)).squeeze(1)  # [n]
    acceptable = (log_p_x >= parent_rows.max(1).values + torch.log(torch.tensor(lenience))).tolist()
    scores = log_p_x.tolist()
    path: list[int] = []
    node = ROOT
    while candidates := [c for c in tree.children_of(node) if acceptable[c]]:
        node = max(candidates, key=lambda c: scores[c])  # max keeps the first of equal scores
        path.append(node)
    return RoundVerdict(
        accepted_nodes=path,
        next_token=int(target_logits[node + 1].argmax()),
        is_bonus=not tree.children_of(node),
        acceptance_probs=exact.acceptance_probs,
    )
