"""The opt-in lossy rules keep their stated guarantees, on chains and on trees.

- lenient(l): no token is emitted with more than 1/l times its target probability;
- mentored(D): KL(emitted || p) <= D, accepting at least as often as the exact rule;
- l = 1 and D = 0 are the exact rule, bit for bit (verdicts and generator state).

How: the walk's exact output law for one position under a depth-1 tree (a chain's single child
is width 1) is computed by enumerating the sibling orders (`position_output`); the guarantees are
checked on it exactly; 100,000 seeded samples through the REAL verify_speculative check that the
walk emits that law (Bretagnolle-Huber-Carol bound, failure probability 1e-6, see
test_acceptance.l1_bound), and that the tests would catch a wrong one; a literal reference
implementation agrees with the walk exactly, verdict and RNG state, on random trees and chains.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tests.two_processes import sampled_on_two_cores
from tests.verifier_svc.test_acceptance import empirical, l1_bound, random_round, verdict_key
from verifier_svc.acceptance import EXACT, MIN_RESIDUAL_MASS, AcceptanceRule, RoundVerdict, verify_greedy, verify_speculative
from verifier_svc.lossy_acceptance import LenientRule, MentoredRule, verify_greedy_lenient
from verifier_svc.sampling import sample_token
from verifier_svc.token_tree import ROOT, TokenTree, build_tree

NUM_SAMPLES = 100_000


def kl(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float(torch.where(a > 0, a * (a / b).log(), torch.zeros_like(a)).sum())


def position_output(p: torch.Tensor, qs: list[torch.Tensor], rule: AcceptanceRule) -> torch.Tensor:
    """The exact law [V] float64 of the first token the walk emits for a root with len(qs)
    children, child j drawn from the dense qs[j] (a point mass for a deterministic drafter):
    over the uniformly random order of the children, the k-th tried child is accepted with
    min(1, cur(x) / (a q(x))) and a rejection leaves norm(max(cur - b q, 0)), (a, b) from the
    rule; after the last rejection the token is sampled from what is left."""
    width = len(qs)
    law = torch.zeros(p.numel(), dtype=torch.float64)
    for order in itertools.permutations(range(width)):
        cur, reach = p.double(), 1.0
        for tried, j in enumerate(order):
            q = qs[j].double()
            ids = q.nonzero().squeeze(1)
            a, b = rule.scales(cur.float(), ids, q[ids].float(), tried)
            accepted = torch.where(q > 0, torch.minimum(q, cur / a), torch.zeros_like(q))  # q(x) r(x)
            law += reach * accepted / math.factorial(width)
            reach *= 1.0 - float(accepted.sum())
            residual = (cur - b * q).clamp(min=0.0)
            cur = residual / residual.sum() if residual.sum() > MIN_RESIDUAL_MASS else cur
        law += reach * cur / math.factorial(width)
    return law


class MemoizedRule:
    """A test-only cache around a rule whose inputs repeat exactly (one fixed root row and fixed
    q's), so 100,000 walks cost what the walk costs rather than 100,000 identical solves."""

    def __init__(self, rule: AcceptanceRule) -> None:
        self.rule, self.name, self.cache = rule, rule.name, {}

    def scales(self, p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, tried: int) -> tuple[float, float]:
        key = (p.numpy().tobytes(), tuple(q_ids.tolist()), tuple(q_probs.tolist()), tried)
        if key not in self.cache:
            self.cache[key] = self.rule.scales(p, q_ids, q_probs, tried)
        return self.cache[key]


def walk_first_tokens(p: torch.Tensor, qs: list[torch.Tensor], rule: AcceptanceRule, num_samples: int, seed: int) -> torch.Tensor:
    """[num_samples] first emitted tokens of the real verify_speculative on a root with one child
    per q (fresh draws of each child's token from its q every time)."""
    gen = torch.Generator().manual_seed(seed)
    width, vocab = len(qs), p.numel()
    tokens = torch.stack([torch.multinomial(q.float(), num_samples, replacement=True, generator=gen) for q in qs], 1).tolist()
    q_ids = torch.arange(vocab).expand(width, vocab)
    q_probs = torch.stack([q.float() for q in qs])  # [width, V]
    rows = torch.cat([p.float()[None], torch.full((width, vocab), 1.0 / vocab)])  # the root's row, then bonus rows
    parents = [ROOT] * width
    generator = torch.Generator().manual_seed(seed + 1)
    trees: dict[tuple[int, ...], TokenTree] = {}  # a tree is plain data: build each shape once
    first = []
    for drafted in tokens:
        tree = trees.get(tuple(drafted)) or trees.setdefault(tuple(drafted), build_tree(drafted, parents))
        verdict = verify_speculative(rows, tree, q_ids, q_probs, generator, rule)
        first.append(drafted[verdict.accepted_nodes[0]] if verdict.accepted_nodes else verdict.next_token)
    return torch.tensor(first)


def random_dist(gen: torch.Generator, vocab: int, scale: float = 1.5) -> torch.Tensor:
    return (scale * torch.randn(vocab, generator=gen)).softmax(-1)


def point_mass(token: int, vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(token), vocab).float()


def worlds() -> dict[str, tuple[torch.Tensor, list[torch.Tensor]]]:
    """name -> (p [V], the q of each child of the root): chains (one child) and trees."""
    gen = torch.Generator().manual_seed(11)
    v = 6
    p = random_dist(gen, v)
    p_zero = p.clone()
    p_zero[2] = 0.0
    p_zero /= p_zero.sum()
    q = random_dist(gen, v)
    unlikely = p.argsort()[:3].tolist()
    return {
        "chain, stochastic q": (p, [q]),
        "chain, point mass on an unlikely token": (p, [point_mass(unlikely[0], v)]),
        "chain, point mass where p = 0": (p_zero, [point_mass(2, v)]),
        "tree of 2, i.i.d. stochastic siblings": (p, [q, q]),
        "tree of 3, each sibling its own q": (p, [q, random_dist(gen, v), random_dist(gen, v)]),
        "tree of 2, point masses": (p, [point_mass(unlikely[0], v), point_mass(unlikely[1], v)]),
        "tree of 3, point masses, one repeated": (p, [point_mass(unlikely[0], v), point_mass(unlikely[1], v), point_mass(unlikely[0], v)]),
    }


LENIENCES = (1.0, 0.5, 0.3, 0.1)
BUDGETS = (0.0, 0.01, 0.1, 0.5)


@pytest.mark.parametrize("name", list(worlds()))
def test_closed_form_guarantees_on_chains_and_trees(name: str) -> None:
    """On the exact law of the walk: lenient output <= p / l everywhere; mentored output within
    KL D of p; both accept (emit a drafted token) at least as often as the exact rule, and more
    as l falls or D grows; l = 1 and D = 0 emit p itself."""
    p, qs = worlds()[name]
    p64 = p.double()
    exact = position_output(p, qs, EXACT)
    torch.testing.assert_close(exact, p64, atol=1e-7, rtol=0)  # the enumeration is right for the exact rule

    def acceptance(rule: AcceptanceRule) -> float:  # P(the first token is a drafted one, accepted)
        return 1.0 - _rejection_probability(p, qs, rule)

    previous = acceptance(EXACT)
    for lenience in LENIENCES:
        law = position_output(p, qs, LenientRule(lenience))
        excess = float((law - p64 / lenience).max())
        assert excess <= 1e-7, f"l = {lenience}: a token emitted with {excess} more than p / l"
        assert acceptance(LenientRule(lenience)) >= previous - 1e-9
        previous = acceptance(LenientRule(lenience))
    previous = acceptance(EXACT)
    for budget in BUDGETS:
        law = position_output(p, qs, MentoredRule(budget))
        assert kl(law, p64) <= budget + 1e-7, f"D = {budget}: KL(emitted || p) = {kl(law, p64)}"
        assert acceptance(MentoredRule(budget)) >= previous - 1e-9
        previous = acceptance(MentoredRule(budget))
    for same in (LenientRule(1.0), MentoredRule(0.0)):
        torch.testing.assert_close(position_output(p, qs, same), p64, atol=1e-7, rtol=0)
    if "p = 0" not in name:  # a draft the target forbids stays rejected whatever the rule
        assert acceptance(LenientRule(0.5)) > acceptance(EXACT) + 1e-3
        assert acceptance(MentoredRule(0.1)) > acceptance(EXACT) + 1e-3


def _rejection_probability(p: torch.Tensor, qs: list[torch.Tensor], rule: AcceptanceRule) -> float:
    """P(every child of the root is rejected): the enumeration's `reach` at the end."""
    total = 0.0
    for order in itertools.permutations(range(len(qs))):
        cur, reach = p.double(), 1.0
        for tried, j in enumerate(order):
            q = qs[j].double()
            ids = q.nonzero().squeeze(1)
            a, b = rule.scales(cur.float(), ids, q[ids].float(), tried)
            reach *= 1.0 - float(torch.where(q > 0, torch.minimum(q, cur / a), torch.zeros_like(q)).sum())
            residual = (cur - b * q).clamp(min=0.0)
            cur = residual / residual.sum() if residual.sum() > MIN_RESIDUAL_MASS else cur
        total += reach / math.factorial(len(qs))
    return total


def test_lenient_walk_never_exceeds_p_over_l() -> None:
    """100,000 real walks over a tree of 2 i.i.d. stochastic siblings with l = 0.3: the emitted
    frequencies stay within the sampling bound of the law, and below p / l + eps / 2 everywhere.

    Bound: with prob >= 1 - 1e-6, ||p_hat - law||_1 < eps = l1_bound(6, 100,000) = 0.0193, and a
    single cell moves at most half the L1 distance, so p_hat(x) < law(x) + eps / 2 <= p(x) / l +
    eps / 2. Power: a rule whose law exceeds p / l by >= eps somewhere fails that check (its
    p_hat exceeds p / l by > eps / 2); a plausible bug, resampling from p after a rejection
    instead of the residual (b = 0), is such a rule here.
    """
    p, qs = worlds()["tree of 2, i.i.d. stochastic siblings"]
    lenience, vocab = 0.3, p.numel()
    eps = l1_bound(vocab, NUM_SAMPLES)
    law = position_output(p, qs, LenientRule(lenience))
    p_hat = empirical(sampled_on_two_cores(walk_first_tokens, p, qs, LenientRule(lenience), num_samples=NUM_SAMPLES, seed=5), vocab)
    assert float((p_hat - law).abs().sum()) < eps, "the walk does not emit the lenient law"
    excess = float((p_hat - p.double() / lenience).max())
    assert excess < eps / 2, f"a token emitted {excess} above p / l"
    assert float((p_hat - p.double()).abs().sum()) > eps, "lenience changed nothing measurable"

    class ResampleFromP:
        name = "lenient without residual"

        def scales(self, p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, tried: int) -> tuple[float, float]:
            return lenience, 0.0

    broken = position_output(p, qs, ResampleFromP())
    assert float((broken - p.double() / lenience).max()) >= eps, "the planted bug would go unnoticed"


def test_mentored_walk_emits_its_closed_form_within_kl() -> None:
    """100,000 real walks over a tree of 2 point-mass siblings (a copy drafter's branch) with D = 0.1:
    the law (first child mentored, later siblings exact against its residual, averaged over the
    order) has KL(law || p) <= D exactly; the emitted frequencies match it within eps =
    l1_bound(6, 100,000) = 0.0193, and the same statistic tells it apart from p (what the exact
    rule emits) and from the law of a 4x larger budget."""
    p, qs = worlds()["tree of 2, point masses"]
    budget, vocab = 0.1, p.numel()
    eps = l1_bound(vocab, NUM_SAMPLES)
    law = position_output(p, qs, MentoredRule(budget))
    assert kl(law, p.double()) <= budget + 1e-9
    samples = sampled_on_two_cores(walk_first_tokens, p, qs, MemoizedRule(MentoredRule(budget)), num_samples=NUM_SAMPLES, seed=9)
    p_hat = empirical(samples, vocab)
    assert float((p_hat - law).abs().sum()) < eps, "the walk does not emit the mentored law"
    for wrong_name, wrong in {"p": p.double(), "the law for 4 D": position_output(p, qs, MentoredRule(4 * budget))}.items():
        assert float((wrong - law).abs().sum()) >= 2 * eps, f"{wrong_name} is too close to the law for this test to have power"
        assert float((p_hat - wrong).abs().sum()) > eps, f"the test cannot tell the law from {wrong_name}"


# ---------------------------------------------------------------- the walk vs. a literal reference


def reference_verify(target_probs: torch.Tensor, tree: TokenTree, draft_q_ids: torch.Tensor, draft_q_probs: torch.Tensor,
                     generator: torch.Generator, rule: AcceptanceRule) -> RoundVerdict:
    """The lossy walk, literally: dense q; a child is accepted iff u < min(1, p(x) / (a q(x)))
    in ONE comparison (the fast path's two-stage test, exact ratio first, is equivalent for
    a <= 1); a rejection leaves norm(max(p - b q, 0)). Randomness in the fast path's order."""
    n, vocab = len(tree), target_probs.shape[1]
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    q = torch.zeros(n, vocab)
    for i in range(n):
        q[i].index_add_(0, draft_q_ids[i], draft_q_probs[i])
    exact = [min(1.0, float(target_probs[parents[i] + 1, tokens[i]]) / float(q[i, tokens[i]])) for i in range(n)]
    path, node = [], ROOT
    while True:
        children = [i for i in range(n) if parents[i] == node]
        p = target_probs[node + 1]
        if not children:
            return RoundVerdict(path, sample_token(p, generator), True, torch.tensor(exact))
        if len(children) > 1:
            children = [children[j] for j in torch.randperm(len(children), generator=generator).tolist()]
        for tried, child in enumerate(children):
            u = float(torch.rand((), generator=generator))
            a, b = rule.scales(p, draft_q_ids[child], draft_q_probs[child], tried)
            if u < min(1.0, float(p[tokens[child]]) / (a * float(q[child, tokens[child]]))):
                path.append(child)
                node = child
                break
            residual = (p - b * q[child]).clamp(min=0.0)
            p = residual / residual.sum() if residual.sum() > MIN_RESIDUAL_MASS else p
        else:
            return RoundVerdict(path, sample_token(p, generator), False, torch.tensor(exact))


@pytest.mark.parametrize("make_rule", [lambda g: LenientRule(float(torch.rand((), generator=g)) * 0.9 + 0.05),
                                       lambda g: MentoredRule(float(torch.rand((), generator=g)) ** 2)],
                         ids=["lenient", "mentored"])
def test_walk_matches_reference(make_rule) -> None:  # type: ignore[no-untyped-def]
    lossy_acceptances = 0
    for i in range(400):
        inputs = random_round(torch.Generator().manual_seed(20_000 + i))
        rule = make_rule(torch.Generator().manual_seed(i))
        fast_gen, slow_gen = torch.Generator().manual_seed(i), torch.Generator().manual_seed(i)
        fast = verify_speculative(*inputs, fast_gen, rule)
        slow = reference_verify(*inputs, slow_gen, rule)
        assert (fast.accepted_nodes, fast.next_token, fast.is_bonus) == (slow.accepted_nodes, slow.next_token, slow.is_bonus), i
        assert torch.equal(fast_gen.get_state(), slow_gen.get_state()), "the two consumed randomness differently"
        torch.testing.assert_close(fast.acceptance_probs, slow.acceptance_probs.float(), rtol=1e-6, atol=0)
        exact = verify_speculative(*inputs, torch.Generator().manual_seed(i))
        lossy_acceptances += fast.num_accepted > exact.num_accepted
    assert lossy_acceptances > 20, "the lossy rule hardly ever accepted more: the comparison is too weak"


# ---------------------------------------------------------------- l = 1 and D = 0 are the exact rule


def test_lenience_one_and_budget_zero_are_exact_bit_for_bit() -> None:
    rounds = [random_round(torch.Generator().manual_seed(30_000 + i)) for i in range(300)]

    def run(rule: AcceptanceRule) -> tuple[list[tuple[int, int, bool, tuple[float, ...]]], torch.Tensor]:
        generator = torch.Generator().manual_seed(4)
        return [verdict_key(verify_speculative(*r, generator, rule)) for r in rounds], generator.get_state()

    exact_verdicts, exact_state = run(EXACT)
    for same in (LenientRule(1.0), MentoredRule(0.0)):
        verdicts, state = run(same)
        assert verdicts == exact_verdicts and torch.equal(state, exact_state), same.name
    assert run(LenientRule(0.5))[0] != exact_verdicts  # the comparison can tell rules apart


def test_greedy_lenience_one_is_verify_greedy() -> None:
    for i in range(100):
        gen = torch.Generator().manual_seed(i)
        target, tree, _, _ = random_round(gen)
        logits = target.clamp_min(1e-12).log()
        logits[:, 0] = logits.max(1).values  # ties at the max: exact greedy takes the lowest id
        assert verdict_key(verify_greedy_lenient(logits, tree, 1.0)) == verdict_key(verify_greedy(logits, tree))


# ---------------------------------------------------------------- greedy lenience (temperature 0)


GREEDY_LENIENT_TABLE = [
    # (probabilities of the root row, tokens, parents, lenience, accepted path, next token)
    # p(1) = 0.3 >= 0.5 * 0.5: accepted though not the argmax; exact greedy rejects it.
    ([0.5, 0.3, 0.15, 0.05], [1], [ROOT], 0.5, [0], 0),
    ([0.5, 0.3, 0.15, 0.05], [2], [ROOT], 0.5, [], 0),  # 0.15 < 0.25: rejected, next = argmax
    ([0.5, 0.3, 0.15, 0.05], [2], [ROOT], 0.3, [0], 0),  # 0.15 >= 0.15
    # two acceptable siblings: the walk takes the likelier one (node 1), though node 0 comes first
    ([0.5, 0.3, 0.15, 0.05], [1, 0], [ROOT, ROOT], 0.5, [1], 0),
]


@pytest.mark.parametrize(("probs", "tokens", "parents", "lenience", "path", "next_token"), GREEDY_LENIENT_TABLE)
def test_verify_greedy_lenient_table(probs: list[float], tokens: list[int], parents: list[int], lenience: float,
                                     path: list[int], next_token: int) -> None:
    root = torch.tensor(probs).log()
    rows = torch.stack([root] + [root] * len(tokens))  # every node's row: the same, argmax 0
    verdict = verify_greedy_lenient(rows * 1.0, build_tree(tokens, parents), lenience)
    assert (verdict.accepted_nodes, verdict.next_token) == (path, next_token)
    assert verdict.acceptance_probs.tolist() == [float(t == 0) for t in tokens]  # the exact rule's, as documented


def test_greedy_lenience_reads_temperature_one_probabilities() -> None:
    """p(x) >= l * max(p) on the softmax of the raw logits: scaling logits (what a temperature
    would do) changes the verdict, so the rule must not be applied to standardized rows."""
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # p(1) / p(0) = e^-1 = 0.37
    assert verify_greedy_lenient(logits, build_tree([1], [ROOT]), 0.3).accepted_nodes == [0]
    assert verify_greedy_lenient(logits * 2, build_tree([1], [ROOT]), 0.3).accepted_nodes == []  # e^-2 = 0.14
