"""The mentored-decoding solver: its closed form is the post's rule, stays within the KL budget,
spends it (so it is the most accepting rule there is), and accepts more as the budget grows.

Notation as in the code: p is the TARGET, q the DRAFT (the post has them the other way round).
Sampling checks of the emitted distribution are in test_lossy_acceptance.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from verifier_svc.mentored_decoding import mentored_output, solve_mentored

BUDGETS = (0.0, 1e-4, 1e-3, 0.01, 0.1, 0.5, 2.0, 50.0)


def kl(a: torch.Tensor, b: torch.Tensor) -> float:
    """KL(a || b) in nats, float64, 0 log 0 = 0 (a > 0 where b = 0 gives inf)."""
    a, b = a.double(), b.double()
    return float(torch.where(a > 0, a * (a / b).log(), torch.zeros_like(a)).sum())


def dense(ids: torch.Tensor, probs: torch.Tensor, vocab: int) -> torch.Tensor:
    """q [V] float64, normalized (as the solver reads it: float32 inputs sum to 1 only to ~1e-7)."""
    q = torch.zeros(vocab, dtype=torch.float64).index_add_(0, ids, probs.double())
    return q / q.sum()


def cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """name -> (p [V], q_ids [S], q_probs [S])."""
    gen = torch.Generator().manual_seed(7)
    v = 10
    p = (1.5 * torch.randn(v, generator=gen)).softmax(-1)
    p_zeros = p.clone()
    p_zeros[[1, 4]] = 0.0
    p_zeros /= p_zeros.sum()
    q = (1.5 * torch.randn(v, generator=gen)).softmax(-1)
    return {
        "dense random": (p, torch.arange(v), q),
        "point mass on an unlikely token": (p, torch.tensor([int(p.argmin())]), torch.tensor([1.0])),
        "point mass on the likeliest token": (p, torch.tensor([int(p.argmax())]), torch.tensor([1.0])),
        # sparse q, one support token where p = 0, padding ids repeating a real id
        "sparse padded q, partly where p = 0": (p_zeros, torch.tensor([4, 0, 7, 0, 0]), torch.tensor([0.3, 0.5, 0.2, 0.0, 0.0])),
        # a point mass listed over the whole vocabulary, every other entry probability 0
        "one-hot q over the vocabulary": (p, torch.arange(v), torch.nn.functional.one_hot(p.argmin(), v).float()),
        "large vocabulary, point mass": ((2 * torch.randn(49152, generator=gen)).softmax(-1), torch.tensor([17]), torch.tensor([1.0])),
    }


def direct_output(p: torch.Tensor, q: torch.Tensor, alpha: float, gamma: float) -> torch.Tensor:
    """What one position emits, straight from the rule's definition: x ~ q accepted with
    r(x) = min(1, p(x) / (alpha q(x))), else a sample of s = norm(max(p - gamma q, 0))."""
    p, q = p.double() / p.double().sum(), q.double()
    r = torch.where(q > 0, (p / (alpha * q)).clamp(max=1.0), torch.zeros_like(q))
    beta = float((q * r).sum())
    s = (p - gamma * q).clamp(min=0.0)
    return q * r + ((1.0 - beta) * s / s.sum() if s.sum() > 0 else 0.0)  # nothing left: all accepted


@pytest.mark.parametrize("name", list(cases()))
def test_solution_is_the_posts_rule_within_budget_and_spends_it(name: str) -> None:
    p, q_ids, q_probs = cases()[name]
    q = dense(q_ids, q_probs, p.numel())
    p = p.double() / p.double().sum()
    exact_acceptance = float(torch.minimum(p, q).sum())
    previous = -1.0
    for budget in BUDGETS:
        solution = solve_mentored(p, q_ids, q_probs, budget)
        pi = mentored_output(p, q_ids, q_probs, solution)
        assert 0.0 < solution.alpha <= 1.0 <= solution.gamma
        assert abs(float(pi.sum()) - 1.0) < 1e-9
        # The closed form clip(q, p / gamma, p / alpha) is the post's r and s, applied literally.
        torch.testing.assert_close(pi, direct_output(p, q, solution.alpha, solution.gamma), atol=1e-9, rtol=0)
        divergence = kl(pi, p)
        assert divergence <= budget + 1e-9, f"KL(pi || p) = {divergence} over the budget {budget}"
        assert solution.kl == pytest.approx(divergence, abs=1e-9)
        assert float((q * torch.where(q > 0, (p / (solution.alpha * q)).clamp(max=1.0), 0.0)).sum()) == pytest.approx(solution.acceptance, abs=1e-9)
        assert solution.acceptance >= exact_acceptance - 1e-9, "accepts less than the exact rule"
        assert solution.acceptance >= previous - 1e-12, "a larger budget accepted less"
        saturated = solution.acceptance >= float(q[p > 0].sum()) - 1e-9  # every draft p allows is accepted
        if budget > 0 and not saturated:
            # Not saturated, so the budget is the binding constraint: the search spends it.
            assert divergence >= budget * (1 - 1e-3), f"only {divergence} of the budget {budget} used"
            assert solution.acceptance > exact_acceptance
        previous = solution.acceptance
    assert solve_mentored(p, q_ids, q_probs, 0.0).alpha == 1.0 == solve_mentored(p, q_ids, q_probs, 0.0).gamma


def test_zero_entries_of_q_are_outside_its_support() -> None:
    """Listing q over more ids with probability 0 (padding) changes nothing."""
    p, q_ids, q_probs = cases()["point mass on an unlikely token"]
    listed = cases()["one-hot q over the vocabulary"]
    assert solve_mentored(p, q_ids, q_probs, 0.1) == solve_mentored(*listed, 0.1)


def test_point_mass_is_the_two_point_kl_ball() -> None:
    """For q = [x] the output raises p(x) to the largest pi(x) with Bernoulli KL(pi(x) || p(x))
    <= D and scales every other token alike: checked against bisection on that scalar equation."""
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    budget = 0.05
    solution = solve_mentored(p, torch.tensor([0]), torch.tensor([1.0]), budget)
    pi = mentored_output(p, torch.tensor([0]), torch.tensor([1.0]), solution)

    def bernoulli_kl(a: float, b: float) -> float:
        return a * math.log(a / b) + (1 - a) * math.log((1 - a) / (1 - b))

    lo, hi = 0.1, 1.0 - 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if bernoulli_kl(mid, 0.1) <= budget else (lo, mid)
    assert float(pi[0]) == pytest.approx(lo, abs=1e-6)
    assert solution.acceptance == pytest.approx(lo, abs=1e-6)  # pi(x) is all accepted mass
    torch.testing.assert_close(pi[1:] / p[1:].double(), torch.full((3,), (1 - lo) / 0.9, dtype=torch.float64), atol=1e-6, rtol=0)


def test_no_rule_within_the_budget_accepts_more() -> None:
    """Optimality (the post's KKT claim), against a generic solver: maximize sum_x min(q, pi)
    over distributions pi with KL(pi || p) <= D (written smoothly: t <= q, t <= pi)."""
    scipy_optimize = pytest.importorskip("scipy.optimize")
    import numpy as np

    gen = torch.Generator().manual_seed(3)
    for trial in range(4):
        v = 5
        p = (1.5 * torch.randn(v, generator=gen)).softmax(-1).double().numpy()
        q = (1.5 * torch.randn(v, generator=gen)).softmax(-1).double().numpy()
        budget = [0.01, 0.05, 0.2, 0.6][trial]
        ours = solve_mentored(torch.tensor(p), torch.arange(v), torch.tensor(q), budget).acceptance

        def neg_acceptance(z: np.ndarray) -> float:
            return -float(z[v:].sum())

        constraints = [
            {"type": "eq", "fun": lambda z: z[:v].sum() - 1.0},
            {"type": "ineq", "fun": lambda z: budget - float(np.sum(np.where(z[:v] > 0, z[:v] * np.log(np.maximum(z[:v], 1e-300) / p), 0.0)))},
            {"type": "ineq", "fun": lambda z: q - z[v:]},
            {"type": "ineq", "fun": lambda z: z[:v] - z[v:]},
        ]
        start = np.concatenate([p, np.minimum(p, q)])
        best = scipy_optimize.minimize(neg_acceptance, start, method="SLSQP", constraints=constraints,
                                       bounds=[(1e-12, 1.0)] * (2 * v), options={"ftol": 1e-12, "maxiter": 500})
        assert best.success, best.message
        assert -best.fun <= ours + 1e-6, f"a generic solver found acceptance {-best.fun} > {ours} within KL {budget}"
        assert -best.fun >= ours - 1e-4, "the generic solver should reach the optimum too (else this test is weak)"
