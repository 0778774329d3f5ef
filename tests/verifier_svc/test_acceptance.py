"""The acceptance rule is exact: speculative sampling emits tokens distributed as the target p.

Statistical claims get statistical tests with a stated bound (see l1_bound); greedy gets a
table of exact cases; the fast verify_speculative is compared with a slow, literal reference.
The exponential race (verify_coupled) emits the same tokens as plain race decoding whatever the
tree, and plain race decoding is distributed as the target; the probability it reports for a
node (race_agreement) is how often the race accepts q's winner, tested by sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch

from specdec.coupled_sampling import exponentials, race_winner
from verifier_svc.acceptance import MIN_RESIDUAL_MASS, RoundVerdict, race_agreement, verify_coupled, verify_greedy, verify_speculative
from verifier_svc.sampling import sample_token
from verifier_svc.token_tree import ROOT, TokenTree, build_tree, chain
from tests.two_processes import sampled_on_two_cores

FAILURE_PROB = 1e-6  # per statistical assertion
MOVED_MASS = 0.02  # the smallest error the distribution tests must catch: L1 distance 0.04
VOCAB = 8
NUM_SAMPLES = 100_000
JOINT_VOCAB = 4
NUM_JOINT_SAMPLES = 130_000


def l1_bound(num_cells: int, num_samples: int, failure_prob: float = FAILURE_PROB) -> float:
    """The L1 distance an honest empirical distribution stays below, but with prob failure_prob.

    Bretagnolle-Huber-Carol: for the empirical distribution p_hat of n i.i.d. draws from p on
    V cells, P(||p_hat - p||_1 >= eps) <= 2^V exp(-n eps^2 / 2). Setting the right side to
    delta gives eps = sqrt(2 (V ln 2 + ln(1/delta)) / n). With delta = 1e-6:
      first token, V = 8 cells,        n = 100,000: eps = 0.0197
      two tokens,  V = 4^2 = 16 cells, n = 130,000: eps = 0.0196
    Power: if a broken rule emits r instead of p then, but with prob delta, ||p_hat - r||_1 < eps
    and so ||p_hat - p||_1 > ||r - p||_1 - eps: every r with ||r - p||_1 >= 2 eps fails the test.
    Moving 0.02 of mass between two tokens (L1 0.04 > 2 eps in both settings) is such an r.
    """
    return math.sqrt(2 * (num_cells * math.log(2) + math.log(1 / failure_prob)) / num_samples)


def empirical(samples: torch.Tensor, num_cells: int) -> torch.Tensor:
    return torch.bincount(samples, minlength=num_cells).double() / samples.numel()


def with_moved_mass(p: torch.Tensor, amount: float = MOVED_MASS) -> torch.Tensor:
    """p with `amount` of mass taken from its most likely cell and given to its least likely one."""
    wrong = p.double().clone()
    wrong[p.argmax()] -= amount
    wrong[p.argmin()] += amount
    return wrong


def assert_distributed_as(samples: torch.Tensor, p: torch.Tensor, wrong: dict[str, torch.Tensor]) -> None:
    """samples ~ p within l1_bound, and the same statistic tells p apart from each wrong r."""
    num_cells, num_samples = p.numel(), samples.numel()
    eps = l1_bound(num_cells, num_samples)
    p_hat = empirical(samples, num_cells)
    distance = (p_hat - p.double()).abs().sum().item()
    assert distance < eps, f"||p_hat - p||_1 = {distance:.4f} >= {eps:.4f}: emitted tokens are not distributed as p"
    for name, r in wrong.items():
        r_distance = (r.double() - p.double()).abs().sum().item()
        assert r_distance >= 2 * eps, f"{name} is too close to p for this test to have power"
        statistic = (p_hat - r.double()).abs().sum().item()
        assert statistic > eps, f"the test cannot tell p from {name}: {statistic:.4f} <= {eps:.4f}"


# ---------------------------------------------------------------- one drafted token


def dense(ids: torch.Tensor, probs: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.zeros(vocab).index_add_(0, ids, probs)


def softmax_with_zeros(seed: int, zeros: tuple[int, ...] = (), vocab: int = VOCAB) -> torch.Tensor:
    logits = 1.5 * torch.randn(vocab, generator=torch.Generator().manual_seed(seed))
    logits[list(zeros)] = float("-inf")
    return logits.softmax(dim=-1)


def point_mass(token: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([token]), torch.tensor([1.0])


def one_token_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """name -> (p [V], q_ids [S], q_probs [S])."""
    dense_p = softmax_with_zeros(1)
    likely_p = softmax_with_zeros(3)
    zero_p = softmax_with_zeros(4, zeros=(2, 5, 6))
    equal_p = softmax_with_zeros(5, zeros=(1,))
    # Sparse q (3 of 8 tokens, one of them where p = 0), padded with probability-0 entries whose
    # id repeats the real id 0 after it: a scatter-assign densification would erase q(0).
    sparse_p = torch.tensor([0.30, 0.05, 0.10, 0.05, 0.20, 0.00, 0.15, 0.15])
    return {
        "dense random p and q": (dense_p, torch.arange(VOCAB), softmax_with_zeros(2)),
        "point-mass q on a likely token": (likely_p, *point_mass(int(likely_p.argmax()))),
        "point-mass q on a token with p = 0": (zero_p, *point_mass(5)),
        "q = p (always accepted)": (equal_p, equal_p.nonzero().squeeze(1), equal_p[equal_p > 0]),
        "sparse padded q, partly where p = 0": (
            sparse_p,
            torch.tensor([5, 0, 2, 0, 0]),
            torch.tensor([0.3, 0.6, 0.1, 0.0, 0.0]),
        ),
    }


def run_one_token_drafts(
    p: torch.Tensor, q_ids: torch.Tensor, q_probs: torch.Tensor, num_samples: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft x ~ q (the test's own generator), verify it with the real verify_speculative;
    return the first emitted token and whether the draft was accepted, each [num_samples]."""
    drafts = torch.multinomial(dense(q_ids, q_probs, p.numel()), num_samples, replacement=True,
                               generator=torch.Generator().manual_seed(seed))  # [n]
    target = torch.stack([p, softmax_with_zeros(seed + 1, vocab=p.numel())])  # [2, V]: p, then the bonus row
    ids, probs = q_ids.unsqueeze(0), q_probs.unsqueeze(0)  # [1, S]
    generator = torch.Generator().manual_seed(seed + 2)
    first, accepted = [], []
    chains = {x: chain([x]) for x in range(p.numel())}  # a draft's tree depends on its token alone
    for x in drafts.tolist():
        verdict = verify_speculative(target, chains[x], ids, probs, generator)
        first.append(x if verdict.num_accepted else verdict.next_token)
        accepted.append(verdict.num_accepted == 1)
    return torch.tensor(first), torch.tensor(accepted)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(one_token_cases()))
def test_first_emitted_token_is_distributed_as_p(name: str) -> None:
    cases = one_token_cases()
    p, q_ids, q_probs = cases[name]
    q = dense(q_ids, q_probs, VOCAB)
    first, accepted = sampled_on_two_cores(run_one_token_drafts, p, q_ids, q_probs, num_samples=NUM_SAMPLES,
                                           seed=100 * list(cases).index(name))

    wrong = {"p with 0.02 of mass moved": with_moved_mass(p)}
    # Plausible broken rules, where they differ from p enough to be told apart:
    # accept every draft (emits q); on rejection resample from p instead of the residual.
    overlap = torch.minimum(p, q)
    for rule, r in {"q": q, "resampling from p": overlap + (1 - overlap.sum()) * p}.items():
        if (r - p).abs().sum() >= 2 * l1_bound(VOCAB, NUM_SAMPLES):
            wrong[rule] = r
    assert_distributed_as(first, p, wrong)

    assert (p[first[accepted]] > 0).all(), "accepted a draft the target gives probability 0"
    if name.startswith("q = p"):
        assert accepted.all()
    if name.startswith("point-mass q on a token with p = 0"):
        assert not accepted.any()


def test_empty_draft_samples_p() -> None:
    """k = 0: the next token is plain sampling from p_0 (and is a bonus token by definition)."""
    num_samples = 20_000  # eps = 0.044 by l1_bound: enough to catch sampling from the wrong row
    p0, p1 = softmax_with_zeros(11), softmax_with_zeros(12)
    target = torch.stack([p0])  # [1, V]
    generator = torch.Generator().manual_seed(0)
    no_ids, no_probs, no_drafts = torch.zeros((0, 1), dtype=torch.long), torch.zeros((0, 1)), chain([])
    verdicts = [verify_speculative(target, no_drafts, no_ids, no_probs, generator)
                for _ in range(num_samples)]
    assert all(v.is_bonus and v.num_accepted == 0 and v.acceptance_probs.shape == (0,) for v in verdicts)
    assert_distributed_as(torch.tensor([v.next_token for v in verdicts]), p0, {"p of another row": p1})


# ---------------------------------------------------------------- two drafted tokens


@dataclass(frozen=True)
class TwoStepWorld:
    """A 2-step target p1(x1) p2(x2 | x1) (p3 for the bonus) and drafts x1 ~ q1, x2 ~ q2(. | x1)."""

    p1: torch.Tensor  # [V]
    p2: torch.Tensor  # [V(x1), V]
    p3: torch.Tensor  # [V(x1), V(x2), V]
    q1: torch.Tensor  # [V]
    q2: torch.Tensor  # [V(x1), V]

    @staticmethod
    def make(seed: int) -> TwoStepWorld:
        v, gen = JOINT_VOCAB, torch.Generator().manual_seed(seed)
        p1 = torch.randn(v, generator=gen).softmax(-1)
        p2_logits = torch.randn(v, v, generator=gen)
        p2_logits[1, 3] = p2_logits[3, 0] = float("-inf")  # some continuations impossible under p
        p3 = torch.randn(v, v, v, generator=gen).softmax(-1)
        q1 = torch.randn(v, generator=gen).softmax(-1)
        q2 = torch.randn(v, v, generator=gen).softmax(-1)
        q2[2] = torch.nn.functional.one_hot(torch.tensor(3), v).float()  # a deterministic drafter after x1 = 2
        return TwoStepWorld(p1, p2_logits.softmax(-1), p3, q1, q2)


def sample_first_two_tokens(world: TwoStepWorld, num_samples: int, seed: int) -> torch.Tensor:
    """Draft two tokens, verify them with the real verify_speculative, and return [num_samples]
    cells first * V + second of the first two emitted tokens; when only one token is emitted,
    decoding continues as the service would: plain sampling from p2(. | first)."""
    v, gen, w = JOINT_VOCAB, torch.Generator().manual_seed(seed), world
    x1 = torch.multinomial(w.q1, num_samples, replacement=True, generator=gen)  # [n]
    x2 = torch.multinomial(w.q2[x1], 1, generator=gen).squeeze(1)  # [n]
    drafts = torch.stack([x1, x2], dim=1)  # [n, 2]
    target = torch.stack([w.p1.expand(v, v, v), w.p2.unsqueeze(1).expand(v, v, v), w.p3], dim=2)  # [V, V, 3, V]
    target_rows = [[target[a, b].contiguous() for b in range(v)] for a in range(v)]  # rows [p1, p2(.|a), p3(.|a,b)]
    q_ids = torch.arange(v).expand(2, v)  # [2, V]
    q_probs = [torch.stack([w.q1, w.q2[a]]) for a in range(v)]  # [2, V] per x1
    chains = [[chain([a, b]) for b in range(v)] for a in range(v)]

    generator = torch.Generator().manual_seed(seed + 1)
    first, second = [], []
    for a, b in drafts.tolist():
        verdict = verify_speculative(target_rows[a][b], chains[a][b], q_ids, q_probs[a], generator)
        emitted = [a, b][: verdict.num_accepted] + [verdict.next_token]
        first.append(emitted[0])
        second.append(emitted[1] if len(emitted) > 1 else -1)
    first_t, second_t = torch.tensor(first), torch.tensor(second)
    cont = second_t < 0
    second_t[cont] = torch.multinomial(w.p2[first_t[cont]], 1, generator=gen).squeeze(1)
    return first_t * v + second_t


@pytest.mark.slow
def test_first_two_emitted_tokens_are_jointly_distributed_as_p() -> None:
    """Two drafted tokens (TwoStepWorld): the first two emitted tokens are the accepted drafts and
    the next token, jointly distributed as p1(x1) p2(x2 | x1) within l1_bound."""
    world = TwoStepWorld.make(2024)
    cells = sampled_on_two_cores(sample_first_two_tokens, world, num_samples=NUM_JOINT_SAMPLES, seed=7)
    joint = (world.p1[:, None] * world.p2).flatten()  # [V * V]
    assert_distributed_as(cells, joint, {"p with 0.02 of mass moved": with_moved_mass(joint)})


# ---------------------------------------------------------------- exact properties


def verdict_key(v: RoundVerdict) -> tuple[int, int, bool, tuple[float, ...]]:
    return v.num_accepted, v.next_token, v.is_bonus, tuple(v.acceptance_probs.tolist())


def logits_with_argmax(argmax: list[int], vocab: int = 6) -> torch.Tensor:
    logits = torch.rand(len(argmax), vocab, generator=torch.Generator().manual_seed(len(argmax)))  # [rows, V] in [0, 1)
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 5.0
    return logits


GREEDY_TABLE = [
    # (row argmaxes, drafts, expected num_accepted, next_token, acceptance_probs)
    ([1, 3, 4], [1, 3], 2, 4, [1.0, 1.0]),  # all accepted: bonus = argmax of row k
    ([1, 3, 4], [2, 3], 0, 1, [0.0, 1.0]),  # first rejected; later rows still scored
    ([1, 3, 0, 2], [1, 4, 0], 1, 3, [1.0, 0.0, 1.0]),  # middle rejected
    ([1, 3, 0, 2], [1, 3, 5], 2, 0, [1.0, 1.0, 0.0]),  # last rejected
    ([2], [], 0, 2, []),  # k = 0: plain greedy
]


@pytest.mark.parametrize(("argmax", "drafts", "num_accepted", "next_token", "probs"), GREEDY_TABLE)
def test_verify_greedy_table(argmax: list[int], drafts: list[int], num_accepted: int, next_token: int, probs: list[float]) -> None:
    verdict = verify_greedy(logits_with_argmax(argmax), chain(drafts))
    assert (verdict.num_accepted, verdict.next_token, verdict.is_bonus) == (num_accepted, next_token, num_accepted == len(drafts))
    assert verdict.acceptance_probs.dtype == torch.float32
    assert verdict.acceptance_probs.tolist() == probs


def test_verify_greedy_ties_go_to_the_lowest_id() -> None:
    logits = torch.tensor([[0.0, 2.0, 0.0, 2.0], [1.0, 1.0, 0.0, 0.0]])
    assert verdict_key(verify_greedy(logits, chain([3]))) == (0, 1, False, (0.0,))
    assert verdict_key(verify_greedy(logits, chain([1]))) == (1, 0, True, (1.0,))


def test_acceptance_probs_cover_every_drafted_token() -> None:
    """min(1, p_i(x_i) / q_i(x_i)) at every position, also after the first rejection; q_i(x_i)
    sums repeated support entries; p_i(x_i) = 0 gives 0."""
    target = torch.tensor([[0.1, 0.6, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.5, 0.0], [0.4, 0.3, 0.2, 0.1]])
    drafts = chain([0, 2, 3])
    q_ids = torch.tensor([[0, 1, 0], [2, 2, 1], [3, 0, 0]])
    q_probs = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [1.0, 0.0, 0.0]])
    for seed in range(20):
        verdict = verify_speculative(target, drafts, q_ids, q_probs, torch.Generator().manual_seed(seed))
        torch.testing.assert_close(verdict.acceptance_probs, torch.tensor([0.2, 0.5, 0.0]))
        assert verdict.num_accepted < 3  # draft 2 has p = 0: never accepted


def test_bonus_and_recovered_tokens_come_from_their_rows() -> None:
    one_hot = torch.eye(4)  # [4, 4]: point-mass targets make the right answer deterministic
    drafts, q_ids, q_probs = chain([1, 2]), torch.tensor([[1], [2]]), torch.ones(2, 1)
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        # p_0 and p_1 put all mass on the drafts: both accepted, the bonus comes from p_2.
        all_accepted = verify_speculative(one_hot[[1, 2, 3]], drafts, q_ids, q_probs, generator)
        assert verdict_key(all_accepted) == (2, 3, True, (1.0, 1.0))
        # p_1 gives draft 2 no mass: rejected, recovered from max(p_1 - q_1, 0) = one-hot(0).
        rejected = verify_speculative(one_hot[[1, 0, 3]], drafts, q_ids, q_probs, generator)
        assert verdict_key(rejected) == (1, 0, False, (1.0, 0.0))


def test_residual_without_mass_falls_back_to_p() -> None:
    # A declared q at or above p everywhere (a wire-rounded q may sum past 1): max(p - q, 0) = 0,
    # which torch.multinomial would refuse; the recovered token then comes from p.
    target = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    outcomes = set()
    for seed in range(200):
        verdict = verify_speculative(target, chain([2]), torch.tensor([[2]]), torch.tensor([[1.25]]),
                                     torch.Generator().manual_seed(seed))
        outcomes.add(verdict.num_accepted)
        if verdict.num_accepted == 0:
            assert verdict.next_token == 2  # recovered from p itself
    assert outcomes == {0, 1}


def test_inputs_and_global_rng_are_untouched() -> None:
    target, tree, q_ids, q_probs = random_round(torch.Generator().manual_seed(3), n=5)
    copies = [t.clone() for t in (target, tree.tokens, q_ids, q_probs)]
    torch.manual_seed(123)
    global_state = torch.random.get_rng_state()
    for seed in range(50):
        verify_speculative(target, tree, q_ids, q_probs, torch.Generator().manual_seed(seed))
    assert torch.equal(torch.random.get_rng_state(), global_state)
    assert all(torch.equal(a, b) for a, b in zip((target, tree.tokens, q_ids, q_probs), copies))


def test_same_seed_same_verdicts_different_seeds_differ() -> None:
    rounds = [random_round(torch.Generator().manual_seed(i)) for i in range(300)]

    def run(seed: int) -> list[tuple[int, int, bool, tuple[float, ...]]]:
        generator = torch.Generator().manual_seed(seed)
        return [verdict_key(verify_speculative(*r, generator)) for r in rounds]

    assert run(1) == run(1)
    other = run(2)
    assert sum(a != b for a, b in zip(run(1), other)) > 30


# ---------------------------------------------------------------- fast path vs. slow reference


def reference_verify_speculative(
    target_probs: torch.Tensor, tree: TokenTree, draft_q_ids: torch.Tensor, draft_q_probs: torch.Tensor,
    generator: torch.Generator,
) -> RoundVerdict:
    """Stratos' Algorithm (section 2.1), literally: python lists of children, dense q, dense
    residuals; on a chain it is Algorithm 1 of Leviathan et al.

    It consumes `generator` in the fast path's documented order (a randperm per visited node
    with several children, one torch.rand(()) per child tried, one sample_token at the end),
    so for the same seed the two must agree EXACTLY, which is stronger than comparing output
    distributions: that would let a bias below the statistical bound through. Float rounding
    could flip a decision only for a uniform within ~1e-7 of an acceptance probability; the
    seeds are fixed, so the comparison is deterministic.
    """
    n, vocab = len(tree), target_probs.shape[1]
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    q = torch.zeros(n, vocab)  # [n, V]
    for i in range(n):
        for token, prob in zip(draft_q_ids[i].tolist(), draft_q_probs[i].tolist()):
            q[i, token] += prob

    def ratio(p: torch.Tensor, i: int) -> float:
        p_x, q_x = float(p[tokens[i]]), float(q[i, tokens[i]])
        return 0.0 if p_x == 0 else min(1.0, p_x / q_x) if q_x > 0 else 1.0

    acceptance = [ratio(target_probs[parents[i] + 1], i) for i in range(n)]
    path, node = [], ROOT
    while True:
        children = [i for i in range(n) if parents[i] == node]
        p = target_probs[node + 1]
        if not children:
            return RoundVerdict(path, sample_token(p, generator), True, torch.tensor(acceptance))
        if len(children) > 1:
            children = [children[j] for j in torch.randperm(len(children), generator=generator).tolist()]
        for child in children:
            if float(torch.rand((), generator=generator)) < ratio(p, child):
                path.append(child)
                node = child
                break
            residual = torch.clamp(p - q[child], min=0.0)
            p = residual / residual.sum() if residual.sum() > MIN_RESIDUAL_MASS else p
        else:
            return RoundVerdict(path, sample_token(p, generator), False, torch.tensor(acceptance))


def random_round(gen: torch.Generator, n: int | None = None) -> tuple[torch.Tensor, TokenTree, torch.Tensor, torch.Tensor]:
    """A random round: a random tree (chains, bushes, repeated sibling tokens), a target with
    zeros (as top-k/top-p leave them), sparse padded q that are sometimes point masses and
    sometimes equal to p, each node's token sampled from its q."""
    vocab = int(torch.randint(2, 12, (1,), generator=gen))
    n = int(torch.randint(0, 9, (1,), generator=gen)) if n is None else n
    chain_like = bool(torch.rand((), generator=gen) < 0.3)
    parents = [i - 1 if chain_like else int(torch.randint(ROOT, i, (1,), generator=gen)) for i in range(n)]
    logits = 2 * torch.randn(n + 1, vocab, generator=gen)
    logits[torch.rand(n + 1, vocab, generator=gen) < 0.3] = float("-inf")
    logits[torch.arange(n + 1), torch.randint(0, vocab, (n + 1,), generator=gen)] = 0.0  # every row has mass
    unnormalized = logits.exp()  # a row-wise softmax; 2-D Tensor.softmax can stall for ms on a busy machine
    target = unnormalized / unnormalized.sum(1, keepdim=True)  # [n+1, V]
    width = int(torch.randint(1, vocab + 3, (1,), generator=gen))
    q_ids = torch.randint(0, vocab, (n, width), generator=gen)  # padding ids repeat real ones
    q_probs = torch.zeros(n, width)
    for i in range(n):
        parent_row = target[parents[i] + 1]
        kind = int(torch.randint(0, 3, (1,), generator=gen))
        if kind == 0:  # point mass
            support = torch.randint(0, vocab, (1,), generator=gen)
            weights = torch.ones(1)
        elif kind == 1 and (parent_row > 0).sum() <= width:  # q = p on p's support
            support = parent_row.nonzero().squeeze(1)
            weights = parent_row[support]
        else:  # random sparse q
            size = int(torch.randint(1, min(width, vocab) + 1, (1,), generator=gen))
            support = torch.randperm(vocab, generator=gen)[:size]
            weights = torch.rand(size, generator=gen) + 0.05
            weights /= weights.sum()
        slots = torch.randperm(width, generator=gen)[: support.numel()]  # real entries anywhere among padding
        q_ids[i, slots], q_probs[i, slots] = support, weights
    q_dense = torch.zeros(n, vocab).scatter_add_(1, q_ids, q_probs)
    tokens = torch.multinomial(q_dense, 1, generator=gen).squeeze(1).tolist() if n else []
    return target, build_tree(tokens, parents), q_ids, q_probs


def test_fast_path_matches_reference() -> None:
    rejections = branching = 0
    for i in range(1000):
        inputs = random_round(torch.Generator().manual_seed(10_000 + i))
        fast_gen, slow_gen = torch.Generator().manual_seed(i), torch.Generator().manual_seed(i)
        fast = verify_speculative(*inputs, fast_gen)
        slow = reference_verify_speculative(*inputs, slow_gen)
        assert (fast.accepted_nodes, fast.next_token, fast.is_bonus) == (slow.accepted_nodes, slow.next_token, slow.is_bonus), i
        torch.testing.assert_close(fast.acceptance_probs, slow.acceptance_probs.float(), rtol=1e-6, atol=0)
        assert torch.equal(fast_gen.get_state(), slow_gen.get_state()), "the two consumed randomness differently"
        rejections += not fast.is_bonus
        branching += any(len(inputs[1].children_of(node)) > 1 for node in [ROOT, *fast.accepted_nodes])
    assert rejections > 100  # the recovered-token path was exercised, not just bonuses
    assert branching > 100  # and so were nodes with several children


# ---------------------------------------------------------------- token trees


TREE_GREEDY_TABLE = [
    # (tokens, parents, argmax of rows [root, node 0, node 1, ...], accepted path, next token)
    ([4, 1, 3, 2], [ROOT, ROOT, 1, 1], [1, 0, 2, 5, 5], [1, 3], 5),  # second branch, then a leaf: bonus
    ([4, 1, 3, 2], [ROOT, ROOT, 1, 1], [1, 0, 0, 5, 5], [1], 0),  # second branch, no child matches
    ([4, 1, 3, 2], [ROOT, ROOT, 1, 1], [5, 0, 2, 5, 5], [], 5),  # no child of the root matches
    ([1, 1, 2, 3], [ROOT, ROOT, 0, 1], [1, 5, 5, 0, 0], [0], 5),  # repeated siblings: the first one is walked
    ([7], [ROOT], [7, 2], [0], 2),
]


@pytest.mark.parametrize(("tokens", "parents", "argmax", "path", "next_token"), TREE_GREEDY_TABLE)
def test_verify_greedy_walks_the_tree(tokens: list[int], parents: list[int], argmax: list[int], path: list[int], next_token: int) -> None:
    tree = build_tree(tokens, parents)
    verdict = verify_greedy(logits_with_argmax(argmax, vocab=8), tree)
    assert (verdict.accepted_nodes, verdict.next_token) == (path, next_token)
    leaf = path[-1] if path else ROOT
    assert verdict.is_bonus == (not tree.children_of(leaf))
    expected = [float(t == argmax[p + 1]) for t, p in zip(tokens, parents)]
    assert verdict.acceptance_probs.tolist() == expected


TREE_VOCAB = 3
# Three emitted tokens (so the bonus rows count too), 27 cells, 100,000 samples: eps = 0.0255 by
# l1_bound, so the test catches any output distribution at L1 distance >= 0.051 from p, e.g.
# 0.026 of mass moved between two outcomes.
NUM_TREE_SAMPLES = 100_000
TREE_MOVED_MASS = 0.026


@dataclass(frozen=True)
class TreeWorld:
    """A 3-step target p1(x1) p2(x2 | x1) p3(x3 | x1, x2) over TREE_VOCAB tokens, and the drafts'
    distributions: q1[j] for the j-th child of the root, q2[x1] for every child of a depth-1 node."""

    p1: torch.Tensor  # [V]
    p2: torch.Tensor  # [V, V]
    p3: torch.Tensor  # [V, V, V]
    q1: torch.Tensor  # [width, V]
    q2: torch.Tensor  # [V, V]

    @staticmethod
    def make(seed: int, width: int, same_q: bool) -> TreeWorld:
        gen = torch.Generator().manual_seed(seed)
        v = TREE_VOCAB
        p2 = torch.randn(v, v, generator=gen)
        p2[1, 2] = float("-inf")  # a continuation impossible under p
        q1 = torch.randn(1 if same_q else width, v, generator=gen).softmax(-1).expand(width, v)
        return TreeWorld(
            p1=torch.randn(v, generator=gen).softmax(-1), p2=p2.softmax(-1),
            p3=torch.randn(v, v, v, generator=gen).softmax(-1), q1=q1, q2=torch.randn(v, v, generator=gen).softmax(-1),
        )

    def joint(self) -> torch.Tensor:
        """[V^3]: p(x1, x2, x3), cell x1 * V^2 + x2 * V + x3."""
        return (self.p1[:, None, None] * self.p2[:, :, None] * self.p3).flatten()


def full_tree_parents(width: int) -> list[int]:
    """Width children of the root (nodes 0..width-1), each with width children of its own."""
    return [ROOT] * width + [j for j in range(width) for _ in range(width)]


def sample_tree_outputs(world: TreeWorld, width: int, point_tokens: list[int] | None, num_samples: int, seed: int) -> torch.Tensor:
    """Draft full trees of depth 2 (fresh stochastic draws each time, or the fixed point-mass
    tokens), verify each with the real verify_speculative, and continue the emitted tokens to
    three with plain sampling from p as the service's next rounds would. Returns [num_samples]
    cells of the first three tokens."""
    v, gen = TREE_VOCAB, torch.Generator().manual_seed(seed)
    parents = full_tree_parents(width)
    depth2_parent = torch.tensor(parents[width:])
    if point_tokens is None:  # children: independent draws from the q they declare
        x1 = torch.stack([torch.multinomial(world.q1[j], num_samples, replacement=True, generator=gen) for j in range(width)], 1)
        uniforms = torch.rand(num_samples, width * width, 1, generator=gen)
        cdf = world.q2.cumsum(-1)[x1[:, depth2_parent]]  # [n, width^2, V]
        x2 = (uniforms > cdf).sum(-1).clamp_max(v - 1)  # inverse-CDF draws from q2(. | parent's token)
        all_tokens = torch.cat([x1, x2], 1).tolist()
        q_ids = torch.arange(v).expand(width + width * width, v)
    else:
        all_tokens = [point_tokens] * num_samples
        q_ids = torch.tensor(point_tokens).unsqueeze(1)
    # Every tree has the same shape: built once, each sample's tokens put into it; its rows of p
    # and q are gathered for all samples at once, and each tree is verified afresh.
    shape = build_tree([0] * len(parents), parents)
    tokens_t = torch.tensor(all_tokens)  # [n, nodes]
    first = tokens_t[:, :width]
    rows = torch.cat([world.p1.expand(num_samples, 1, v), world.p2[first], world.p3[first[:, depth2_parent], tokens_t[:, width:]]], 1)  # [n, nodes+1, V]
    if point_tokens is None:
        q_probs = torch.cat([world.q1.expand(num_samples, width, v), world.q2[first[:, depth2_parent]]], 1)  # [n, nodes, V]
    else:
        q_probs = torch.ones(num_samples, len(point_tokens), 1)
    generator = torch.Generator().manual_seed(seed + 1)
    emitted_rows = []
    for sample, tokens in enumerate(all_tokens):
        verdict = verify_speculative(rows[sample], replace(shape, tokens=tokens_t[sample]), q_ids, q_probs[sample], generator)
        emitted_rows.append(([tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token] + [-1, -1])[:3])
    emitted = torch.tensor(emitted_rows)  # [n, 3], -1 where not yet emitted
    for position in (1, 2):
        todo = emitted[:, position] < 0
        rows = world.p2[emitted[todo, 0]] if position == 1 else world.p3[emitted[todo, 0], emitted[todo, 1]]
        emitted[todo, position] = torch.multinomial(rows, 1, generator=gen).squeeze(1)
    return emitted[:, 0] * v * v + emitted[:, 1] * v + emitted[:, 2]


TREE_CASES = {
    # name: (width, children are point masses with these tokens (None: stochastic), q1 the same for all siblings)
    "width 2, stochastic, i.i.d. siblings": (2, None, True),
    "width 3, stochastic, i.i.d. siblings": (3, None, True),
    "width 3, stochastic, each sibling its own q": (3, None, False),
    "width 2, point masses, repeated siblings": (2, [0, 2, 1, 1, 2, 0], True),
    "width 3, point masses, repeated siblings": (3, [1, 1, 2, 0, 2, 0, 2, 2, 1, 0, 1, 2], True),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TREE_CASES))
def test_tree_outputs_are_distributed_as_p(name: str) -> None:
    """Done-means 2: multi-draft speculative sampling over depth-2 trees emits tokens whose joint
    distribution (three tokens, so the bonus row counts too) is p's, within l1_bound."""
    width, point_tokens, same_q = TREE_CASES[name]
    seed = 500 + 10 * list(TREE_CASES).index(name)
    world = TreeWorld.make(seed, width, same_q)
    cells = sampled_on_two_cores(sample_tree_outputs, world, width, point_tokens, num_samples=NUM_TREE_SAMPLES, seed=seed)
    joint = world.joint()
    assert_distributed_as(cells, joint, {"p with 0.026 of mass moved": with_moved_mass(joint, TREE_MOVED_MASS)})


@pytest.mark.slow
def test_tree_statistic_catches_a_rule_without_residuals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above has teeth: a plausible bug, trying each sibling against p itself instead of
    what the earlier rejections left of it, fails it."""
    import verifier_svc.acceptance as acceptance

    width, point_tokens, same_q = TREE_CASES["width 2, point masses, repeated siblings"]
    world = TreeWorld.make(0, width, same_q)
    monkeypatch.setattr(acceptance, "_residual", lambda p, q_ids, q_probs, scale=1.0: p)
    cells = sample_tree_outputs(world, width, point_tokens, NUM_TREE_SAMPLES // 2, seed=1)
    distance = (empirical(cells, TREE_VOCAB**3) - world.joint().double()).abs().sum().item()
    assert distance > l1_bound(TREE_VOCAB**3, NUM_TREE_SAMPLES // 2)


# ---------------------------------------------------------------- the exponential race (seeded sessions)


def toy_target(prefix: tuple[int, ...]) -> torch.Tensor:
    """[JOINT_VOCAB] the next-token p of a toy target after `prefix`: a function of the whole
    prefix, with a zero in some rows (as top-k leaves them)."""
    code = sum((t + 1) * (JOINT_VOCAB + 1) ** i for i, t in enumerate(prefix))
    logits = 1.5 * torch.randn(JOINT_VOCAB, generator=torch.Generator().manual_seed(code), dtype=torch.float64)
    if code % 3 == 0:
        logits[code % JOINT_VOCAB] = float("-inf")
    return logits.softmax(0).float()


def race_decode(seed: int, steps: int) -> list[int]:
    """Plain decoding of the toy target by the race: one target call per token, no drafts."""
    tokens: list[int] = []
    for position in range(steps):
        tokens.append(race_winner(toy_target(tuple(tokens)).double().numpy(), exponentials(seed, position, JOINT_VOCAB)))
    return tokens


def race_speculate(seed: int, steps: int, gen: torch.Generator) -> list[int]:
    """Speculative decoding of the toy target by verify_coupled, over random trees whose nodes
    are the target's own choice at the parent's row, a token drawn from p there, or any token."""
    tokens: list[int] = []
    while len(tokens) < steps:
        n = int(torch.randint(0, 6, (1,), generator=gen))
        parents = [int(torch.randint(ROOT, i, (1,), generator=gen)) for i in range(n)]
        node_tokens: list[int] = []
        for i in range(n):
            prefix = tuple(tokens) + tuple(node_tokens[j] for j in path_to(parents, parents[i]))
            kind = int(torch.randint(0, 3, (1,), generator=gen))
            at = len(prefix)
            if kind == 0:
                node_tokens.append(race_winner(toy_target(prefix).double().numpy(), exponentials(seed, at, JOINT_VOCAB)))
            elif kind == 1:
                node_tokens.append(int(torch.multinomial(toy_target(prefix), 1, generator=gen)))
            else:
                node_tokens.append(int(torch.randint(0, JOINT_VOCAB, (1,), generator=gen)))
        tree = build_tree(node_tokens, parents)
        rows = [tuple(tokens)] + [tuple(tokens) + tuple(node_tokens[j] for j in path_to(parents, i)) for i in range(n)]
        target = torch.stack([toy_target(prefix) for prefix in rows])  # [n+1, V]
        exps = torch.from_numpy(np.stack([exponentials(seed, len(prefix), JOINT_VOCAB) for prefix in rows]))
        q_ids, q_probs = torch.tensor(node_tokens).reshape(n, 1), torch.ones(n, 1)  # point masses
        verdict = verify_coupled(target, tree, q_ids, q_probs, exps)
        tokens += [node_tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token]
    return tokens[:steps]


def path_to(parents: list[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node` (none for ROOT)."""
    path = []
    while node != ROOT:
        path.append(node)
        node = parents[node]
    return path[::-1]


def test_the_race_emits_the_same_tokens_whatever_the_drafts() -> None:
    gen = torch.Generator().manual_seed(31)
    for seed in range(300):
        assert race_speculate(seed, 6, gen) == race_decode(seed, 6), f"seed {seed}"


def race_decoded_pairs(num_samples: int, seed: int) -> torch.Tensor:
    """[num_samples] cells first * V + second of two race-decoded tokens, for the session seeds
    seed, seed + 1, ..."""
    pairs = (race_decode(s, 2) for s in range(seed, seed + num_samples))
    return torch.tensor([first * JOINT_VOCAB + second for first, second in pairs])


def test_race_decoding_is_distributed_as_the_target() -> None:
    """Two tokens, the second's p depending on the first: the joint over NUM_JOINT_SAMPLES seeds
    within l1_bound of the target's; with the invariance above, speculative decoding's too."""
    samples = sampled_on_two_cores(race_decoded_pairs, num_samples=NUM_JOINT_SAMPLES, seed=0)
    joint = torch.stack([toy_target(()).double()[a] * toy_target((a,)).double() for a in range(JOINT_VOCAB)]).flatten()
    assert_distributed_as(samples, joint, {"moved mass": with_moved_mass(joint)})


def test_the_race_walks_its_winners_and_labels_nodes_with_its_own_acceptance() -> None:
    for i in range(100):
        target, tree, q_ids, q_probs = random_round(torch.Generator().manual_seed(20_000 + i))
        exps = torch.empty(target.shape, dtype=torch.float64).exponential_(generator=torch.Generator().manual_seed(i))
        coupled = verify_coupled(target, tree, q_ids, q_probs, exps)
        winners = torch.argmax(target.double() / exps, dim=1)
        node = coupled.accepted_nodes[-1] if coupled.accepted_nodes else ROOT
        assert coupled.next_token == int(winners[node + 1])
        assert all(int(tree.tokens[c]) == int(winners[int(tree.parents[c]) + 1]) for c in coupled.accepted_nodes)
        assert torch.equal(coupled.acceptance_probs, race_agreement(target, tree, q_ids, q_probs).float())
        # Never above speculative sampling's min(1, p/q).
        speculative = verify_speculative(target, tree, q_ids, q_probs, torch.Generator().manual_seed(i))
        assert bool((coupled.acceptance_probs <= speculative.acceptance_probs + 1e-6).all())


RACE_LABEL_SAMPLES = 200_000


def race_label_cases() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(p [V], q_ids [S], q_probs [S]): the nodes of random rounds (sparse padded q, point
    masses, zeros in p) and dense p and q apart, with zeros of their own."""
    cases = []
    for r in range(6):
        target, tree, q_ids, q_probs = random_round(torch.Generator().manual_seed(40_000 + r))
        cases += [(target[int(tree.parents[i]) + 1], q_ids[i], q_probs[i]) for i in range(len(tree))]
    for s in range(4):
        q = softmax_with_zeros(100 + s, zeros=(s,))
        cases.append((softmax_with_zeros(s, zeros=(s + 1,)), torch.arange(VOCAB), q))
    return cases


def test_race_agreement_is_how_often_the_target_wins_with_q_s_winner() -> None:
    """For every token x in q's support: among RACE_LABEL_SAMPLES draws of the Exp(1) variables,
    those where x is q's race winner, the share where it is p's winner too is race_agreement
    (asked of a one-level tree with every such x) within Hoeffding's bound; speculative
    sampling's min(1, p/q), where it differs by more, is rejected by the same test."""
    gen = torch.Generator().manual_seed(5)
    checked = told_apart = 0
    for p, q_ids, q_probs in race_label_cases():
        vocab = p.numel()
        q = torch.zeros(vocab, dtype=torch.float64).scatter_add_(0, q_ids, q_probs.double())
        support = q.nonzero().squeeze(1).tolist()
        tree = build_tree(support, [ROOT] * len(support))
        rows = p.expand(len(support) + 1, vocab)
        labels = race_agreement(rows, tree, q_ids.expand(len(support), -1), q_probs.expand(len(support), -1)).tolist()
        ratios = verify_speculative(rows, tree, q_ids.expand(len(support), -1), q_probs.expand(len(support), -1), torch.Generator()).acceptance_probs
        exps = torch.empty(RACE_LABEL_SAMPLES, vocab, dtype=torch.float64).exponential_(generator=gen)
        p_winner, q_winner = torch.argmax(p.double() / exps, dim=1), torch.argmax(q / exps, dim=1)
        for node, x in enumerate(support):
            draws = int((q_winner == x).sum())
            if draws < 2_000:
                continue
            share = int(((q_winner == x) & (p_winner == x)).sum()) / draws
            bound = math.sqrt(math.log(2 / FAILURE_PROB) / (2 * draws))
            assert abs(share - labels[node]) < bound, f"token {x}: {share:.4f} vs race_agreement {labels[node]:.4f}"
            checked += 1
            if abs(float(ratios[node]) - labels[node]) > 2 * bound:
                assert abs(share - float(ratios[node])) > bound
                told_apart += 1
    assert checked >= 40 and told_apart >= 10, (checked, told_apart)
