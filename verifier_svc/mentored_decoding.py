"""Mentored decoding: the most accepting single-draft rule within a KL budget (seed 002).

Pure functions over tensors. NOTATION: here, as everywhere in specdec, p is the TARGET and q the
DRAFT; the blog post ("An optimal lossy variant of speculative decoding") names them the other
way round. Its problem, in our names, for one drafted position with x ~ q:

    maximize  beta = sum_x q(x) r(x)                       (the probability of accepting x)
    over      r in [0, 1]^V and a residual distribution s
    such that KL(pi || p) <= D,   pi = q r + (1 - beta) s  (what the position emits)

Its KKT solution, translated: r(x) = min(1, p(x) / (alpha q(x))) and
(1 - beta) s(x) = max(0, p(x) / gamma - q(x)) with alpha in (0, 1] and gamma >= 1 tied by
sum(pi) = 1, so that

    pi = clip(q, p / gamma, p / alpha)   (q clipped, token by token, into [p / gamma, p / alpha])

i.e. Algorithm 1 with q scaled by alpha for the ratio and by gamma for the residual; alpha = 1
forces gamma = 1 and pi = p (the exact rule). beta and KL(pi || p) both grow as alpha falls, so
the largest acceptance within the budget is found by a search on alpha alone.

The post writes its constraint as "the KL divergence between the resulting distribution and the
target"; its precomputed sums (of target * ln(target / draft)) suggest it bounded KL(p || pi).
The solution family above is the same for either direction (in both, the stationarity condition
makes pi / p constant on the tokens below q and on those above it), only the alpha a budget buys
differs; we bound KL(pi || p), as issue 7 asks.

Vectorized: q is sparse (S support tokens), and every token outside its support has q = 0, so it
sits in the "above q" set with pi = p / gamma; all sums therefore reduce to the S support tokens
plus p's mass outside them, whatever the vocabulary size. gamma given alpha is closed form (a
piecewise-linear equation solved over breakpoints sorted once, the post's precomputed cumulative
sums), and the search on alpha evaluates a grid of candidates at once: a GRID-ary search (each
step keeps the bracket [largest feasible, next] of GRID alphas), STEPS steps, in log(1 / alpha).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GRID = 64  # candidate alphas evaluated together per search step
STEPS = 4  # bracket shrinks by GRID - 1 per step: log(1/alpha) to ~1e-7 of its range
_F64 = torch.float64


@dataclass(frozen=True)
class MentoredSolution:
    """Accept x with min(1, p(x) / (alpha q(x))); after a rejection sample norm(max(p - gamma q, 0))."""

    alpha: float  # in (0, 1]; 1 is the exact rule
    gamma: float  # >= 1; 1 is the exact rule
    acceptance: float  # beta = sum_x min(q(x), p(x) / alpha): the probability that x ~ q is accepted
    kl: float  # KL(pi || p) of the emitted distribution, <= the budget

    @property
    def is_exact(self) -> bool:
        return self.alpha == 1.0 and self.gamma == 1.0


@dataclass(frozen=True)
class _Support:
    """q's support tokens with p > 0, sorted by the breakpoint q / p, in float64."""

    p: torch.Tensor  # [m] p on those tokens (p normalized over the whole vocabulary)
    q: torch.Tensor  # [m] q there (repeated ids summed)
    ratio: torch.Tensor  # [m] q / p, ascending
    p_out: float  # p's mass outside q's support
    p_cum: torch.Tensor  # [m + 1] sums of p over the first k tokens
    q_cum: torch.Tensor  # [m + 1] likewise for q
    h_at: torch.Tensor  # [m] h(ratio[k]), h(u) = sum max(0, p u - q) + u p_out (see _gamma_inverse)


def _support(p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor) -> _Support:
    ids, inverse = torch.unique(q_ids, return_inverse=True)
    q = torch.zeros(ids.numel(), dtype=_F64).index_add_(0, inverse, q_probs.to(_F64))
    q /= q.sum()  # a q from the wire may sum to 1 only within its tolerance
    total = float(p.sum())  # float32: a float64 sum over the vocabulary costs more than the whole search
    # Padding and other q = 0 entries sit outside the support with the tokens q does not list.
    ids, q = ids[q > 0], q[q > 0]
    p_s = p[ids].to(_F64) / total
    p_out = max(1.0 - float(p_s.sum()), 0.0)
    # Support tokens with p = 0 are never accepted and emitted with probability 0: no part below.
    p_s, q = p_s[p_s > 0], q[p_s > 0]
    ratio, order = (q / p_s).sort()
    p_s, q = p_s[order], q[order]
    zero = torch.zeros(1, dtype=_F64)
    p_cum, q_cum = torch.cat([zero, p_s.cumsum(0)]), torch.cat([zero, q.cumsum(0)])
    h_at = ratio * (p_out + p_cum[:-1]) - q_cum[:-1]
    return _Support(p_s, q, ratio, p_out, p_cum, q_cum, h_at)


def _gamma_inverse(s: _Support, rest: torch.Tensor) -> torch.Tensor:
    """u = 1 / gamma [G] solving h(u) = rest [G], where h(u) = sum_x max(0, p(x) u - q(x)) is
    the residual's mass before normalization; h is increasing and linear between the sorted
    breakpoints q / p: with the first k support tokens below u, h(u) = u (p_out + P_k) - Q_k."""
    k = torch.searchsorted(s.h_at, rest)  # [G] support tokens whose breakpoint lies below u
    slope = s.p_out + s.p_cum[k]
    return torch.where(slope > 0, (rest + s.q_cum[k]) / slope.clamp_min(1e-300), 0.0)


def _evaluate(s: _Support, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For candidates w = 1 / alpha [G]: (beta [G], u = 1 / gamma [G], KL(pi || p) [G])."""
    accepted = torch.minimum(s.q, s.p * w[:, None])  # [G, m] q(x) r(x)
    beta = accepted.sum(1)
    u = _gamma_inverse(s, (1.0 - beta).clamp_min(0.0))
    pi = accepted + (s.p * u[:, None] - s.q).clamp_min(0.0)  # [G, m] pi on the support
    kl = torch.xlogy(pi, pi / s.p).sum(1) + s.p_out * torch.xlogy(u, u)  # outside: pi = p u
    return beta, u, kl


def solve_mentored(p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, max_kl: float) -> MentoredSolution:
    """The mentored-decoding rule for one position: target p [V] (normalized), draft q given
    sparsely by q_ids [S] and q_probs [S] (padding has probability 0), KL budget max_kl = D >= 0.

    Returns the solution with the largest acceptance whose KL(pi || p) <= D (up to the search
    resolution, always on the feasible side). D = 0, and any q that no alpha < 1 helps (q <= p
    wherever p > 0), give the exact rule (alpha = gamma = 1) exactly. The acceptance is never
    below the exact rule's sum min(p, q) and never decreases as D grows.
    """
    s = _support(p, q_ids, q_probs)
    exact = MentoredSolution(1.0, 1.0, acceptance=float(torch.minimum(s.p, s.q).sum()), kl=0.0)
    if not max_kl > 0 or s.ratio.numel() == 0 or float(s.ratio[-1]) <= 1.0:
        return exact
    # Beyond w = max q/p every token is accepted up to q and nothing changes: search [1, w_max].
    lo, hi = 0.0, math.log(float(s.ratio[-1]))  # in t = log w = log(1 / alpha)
    top = _evaluate(s, torch.tensor([math.exp(hi)], dtype=_F64))
    if float(top[2][0]) <= max_kl:
        lo = hi
    else:
        for _ in range(STEPS):  # invariant: KL(e^lo) <= D < KL(e^hi)
            t = torch.linspace(lo, hi, GRID, dtype=_F64)
            feasible = (_evaluate(s, t.exp())[2] <= max_kl).nonzero()
            last = int(feasible.max()) if feasible.numel() else 0  # KL increases with t
            lo, hi = float(t[last]), float(t[min(last + 1, GRID - 1)])
    if lo == 0.0:
        return exact
    beta, u, kl = (float(v[0]) for v in _evaluate(s, torch.tensor([math.exp(lo)], dtype=_F64)))
    return MentoredSolution(alpha=math.exp(-lo), gamma=1.0 / max(u, 1e-12), acceptance=beta, kl=kl)


def mentored_output(p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, solution: MentoredSolution) -> torch.Tensor:
    """pi [V] float64, the closed form of what one drafted position emits under `solution`:
    clip(q, p / gamma, p / alpha), with p and q normalized and q densified (repeated ids summed)."""
    p64 = p.to(_F64) / p.sum(dtype=_F64)
    q = torch.zeros_like(p64).index_add_(0, q_ids, q_probs.to(_F64))
    q /= q.sum()
    return torch.minimum(torch.maximum(q, p64 / solution.gamma), p64 / solution.alpha)
