"""Constraints and penalties in the verifier's session, in-process on a tiny random-weight model
with the default tokenizer's vocabulary: masks at every tree node equal a fresh matcher's along
that node's path; greedy output equals transformers' generate() with llguidance's mask as a
logits processor (chains and trees, right and wrong drafts); the first emitted token at
temperature 1 follows the masked target distribution (chi-square). Sampled outputs' validity:
test_validity.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats
from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

from specdec.grammar import GrammarCompiler
from specdec.output_constraint import OutputConstraint
from specdec.penalties import Penalties
from specdec.sampling_params import SamplingParams
from tests.structured.reference import (
    CONSTRAINTS, FrequencyPresenceProcessor, GrammarLogitsProcessor, masked_distribution,
)
from verifier_svc.acceptance import verify_speculative
from verifier_svc.constraints import tree_masks
from verifier_svc.output_rules import OutputOptions
from verifier_svc.round_input import Limits, PreparedRound, RoundInput
from verifier_svc.session import Session
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree

pytestmark = pytest.mark.usefixtures("one_thread")

LIMITS = Limits(max_draft_tokens=16, max_draft_depth=8, context_length=512)
GREEDY = SamplingParams(temperature=0.0)
PROMPT = [1, 504, 2483, 314, 5019, 28]
EMPTY_TREE = build_tree([], [])


def session(target: TargetModel, compiler: GrammarCompiler, constraint: OutputConstraint | None, sampling: SamplingParams,
            seed: int | None = 0, penalties: Penalties = Penalties()) -> Session:
    output = OutputOptions(constraint=constraint, penalties=penalties)
    return Session(target, list(PROMPT), sampling, seed, LIMITS, output=output, compiler=compiler, eos_token_ids=frozenset([2]))


def valid_walk(compiler: GrammarCompiler, constraint: OutputConstraint, rng: random.Random, length: int) -> list[int]:
    """A random token sequence the grammar allows."""
    matcher = compiler.matcher(constraint, "c")
    out: list[int] = []
    for _ in range(length):
        allowed = np.flatnonzero(compiler.allowed_tokens(matcher))
        allowed = allowed[allowed != 2]
        if not len(allowed):
            break
        token = int(rng.choice(list(allowed)))
        assert matcher.consume_token(token)
        out.append(token)
    return out


@pytest.mark.parametrize("name", ["person", "date", "arithmetic"])
def test_tree_masks_equal_a_fresh_matcher_along_each_path(compiler: GrammarCompiler, name: str) -> None:
    """Random trees of valid and invalid tokens: row i+1 is the mask after node i's path (an
    invalid node's row and subtree, and rows after an EOS, allow everything); the matcher ends where it started."""
    rng = random.Random(7)
    constraint = CONSTRAINTS[name]
    for _ in range(5):
        prefix = valid_walk(compiler, constraint, rng, 3)
        matcher = compiler.matcher(constraint, "c")
        assert matcher.consume_tokens(prefix)
        tokens, parents = [], []
        for i in range(12):
            parent = rng.choice([ROOT, *range(i)])
            path = [tokens[j] for j in _path(parents, parent)]
            fresh = compiler.matcher(constraint, "c")
            ok = fresh.consume_tokens(prefix) and (not path or fresh.try_consume_tokens(path) == len(path))
            choices = np.flatnonzero(compiler.allowed_tokens(fresh)) if ok else np.arange(100, 200)
            tokens.append(int(rng.choice(list(choices))) if rng.random() < 0.8 else rng.randrange(100, 49152))
            parents.append(parent)
        masks = tree_masks(compiler, matcher, build_tree(tokens, parents), frozenset([2])).numpy()
        assert (masks[0] == compiler.allowed_tokens(matcher)).all()
        for i in range(len(tokens)):
            path = [tokens[j] for j in _path(parents, i)]
            fresh = compiler.matcher(constraint, "c")
            assert fresh.consume_tokens(prefix)
            if fresh.try_consume_tokens(path) == len(path) and 2 not in path:
                assert (masks[i + 1] == compiler.allowed_tokens(fresh)).all(), f"node {i}"
            else:
                assert masks[i + 1].all(), f"unreachable node {i} must allow every token"


def _path(parents: list[int], node: int) -> list[int]:
    path = []
    while node != ROOT:
        path.append(node)
        node = parents[node]
    return path[::-1]


def reference_greedy(target: TargetModel, processors: list, max_new_tokens: int) -> list[int]:  # type: ignore[type-arg]
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        out = target.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
            logits_processor=LogitsProcessorList(processors), eos_token_id=2, pad_token_id=0,
        )
    new = out[0, len(PROMPT):].tolist()
    return new[: new.index(2)] if 2 in new else new


def speculate(s: Session, guess: list[int], max_new_tokens: int, rng: random.Random, tree: bool) -> list[int]:
    """Rounds of drafts from `guess` (the expected output), each with a wrong token somewhere and,
    as a tree, a wrong sibling beside the first node; returns the emitted tokens up to EOS."""
    out: list[int] = []
    while len(out) < max_new_tokens:
        ahead = guess[len(out): len(out) + rng.randint(1, 6)] or [rng.randrange(49152)]
        chain = [t if rng.random() < 0.8 else rng.randrange(49152) for t in ahead]
        tokens, parents = chain, list(range(ROOT, len(chain) - 1))
        if tree:
            tokens, parents = [*chain, rng.randrange(49152), rng.randrange(49152)], [*parents, ROOT, 0 if len(chain) > 1 else ROOT]
        verdict = s.verify(RoundInput.point_masses(tokens, parents))
        emitted = [tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token]
        for t in emitted:
            if t == 2:
                return out
            out.append(t)
    return out[:max_new_tokens]


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_greedy_equals_generate_with_the_grammar_processor(tiny: TargetModel, compiler: GrammarCompiler, name: str, tree: bool) -> None:
    constraint = CONSTRAINTS[name]
    expected = reference_greedy(tiny, [GrammarLogitsProcessor(compiler, constraint, len(PROMPT))], 40)
    got = speculate(session(tiny, compiler, constraint, GREEDY), expected, 40, random.Random(1), tree)
    assert got == expected[: len(got)] and len(got) == min(40, len(expected))


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_greedy_equals_generate_with_penalties_and_grammar(tiny: TargetModel, compiler: GrammarCompiler, tree: bool) -> None:
    """repetition_penalty 1.3 (transformers' processor) and frequency_penalty 0.5, under a constraint."""
    constraint = CONSTRAINTS["arithmetic"]
    processors = [
        RepetitionPenaltyLogitsProcessor(1.3), FrequencyPresenceProcessor(0.5, 0.0, len(PROMPT)),
        GrammarLogitsProcessor(compiler, constraint, len(PROMPT)),
    ]
    expected = reference_greedy(tiny, processors, 40)
    s = session(tiny, compiler, constraint, GREEDY, penalties=Penalties(repetition_penalty=1.3, frequency_penalty=0.5))
    got = speculate(s, expected, 40, random.Random(2), tree)
    assert got == expected[: len(got)] and len(got) == min(40, len(expected))


def first_token_counts(tiny: TargetModel, compiler: GrammarCompiler, constraint: OutputConstraint, penalties: Penalties,
                       requests: int) -> tuple[np.ndarray, np.ndarray]:
    """Emitted first tokens of `requests` seeded verdicts at temperature 1, each round two sampled
    siblings from a q over 8 tokens (some disallowed): the session's p for the round (its
    penalties and masks over the round's target pass, computed once per distinct round) and the
    exact rule; and the expected masked p after the prompt."""
    rng = np.random.default_rng(5)
    counts = np.zeros(tiny.vocab_size)
    s = session(tiny, compiler, constraint, SamplingParams(), seed=None, penalties=penalties)
    with torch.inference_mode():
        logits = tiny.model(torch.tensor([PROMPT])).logits[0, -1]
    scores, _ = s.output.processed_logits(logits.unsqueeze(0), EMPTY_TREE)
    allowed = compiler.allowed_tokens(compiler.matcher(constraint, "c"))
    expected = masked_distribution(scores[0], allowed).numpy()
    support = np.concatenate([np.argsort(-expected)[:5], rng.choice(tiny.vocab_size, 3, replace=False)])
    q = rng.dirichlet(np.ones(len(support)))
    qi = [[int(t) for t in support]] * 2
    rounds: dict[tuple[int, ...], tuple[PreparedRound, torch.Tensor]] = {}  # distinct drafts: prepared round, p
    generator = torch.Generator()
    for i in range(requests):
        key = tuple(int(x) for x in rng.choice(support, 2, p=q))
        if key not in rounds:
            p = s.prepare(RoundInput(list(key), [ROOT, ROOT], qi, [q.tolist()] * 2))
            with torch.inference_mode():
                round_logits = tiny.score(tiny.new_cache(), list(PROMPT), p.tree)
            round_scores, round_allowed = s.output.processed_logits(round_logits, p.tree)
            rounds[key] = p, s.output.probs(round_scores, round_allowed, s.sampling)
        p, probs = rounds[key]
        generator.manual_seed(i)
        verdict = verify_speculative(probs, p.tree, p.q_ids, p.q_probs, generator)
        counts[key[verdict.accepted_nodes[0]] if verdict.accepted_nodes else verdict.next_token] += 1
    return counts, expected


def chi_square_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    assert counts[expected == 0].sum() == 0, "a token outside the constraint was emitted"
    expected = expected.astype(np.float64) / expected.astype(np.float64).sum()
    keep = expected * counts.sum() >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum()) * counts.sum()
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(scipy_stats.chisquare(obs, exp).pvalue)


@pytest.mark.slow
@pytest.mark.parametrize("penalized", [False, True], ids=["plain", "penalties"])
def test_first_token_follows_the_masked_target_distribution(tiny: TargetModel, compiler: GrammarCompiler, penalized: bool) -> None:
    """2,000 seeded requests, temperature 1, a constraint with several first tokens; with
    penalties: repetition 1.3 and frequency 0.5 (the prompt's tokens are penalized)."""
    constraint = OutputConstraint("regex", "(cat|dog|bird|fish|cow|owl)s?[0-9]")
    penalties = Penalties(repetition_penalty=1.3, frequency_penalty=0.5) if penalized else Penalties()
    counts, expected = first_token_counts(tiny, compiler, constraint, penalties, 2000)
    assert (expected > 0.01).sum() >= 3, "the test needs a constraint with several likely first tokens"
    assert chi_square_pvalue(counts, expected) > 1e-3
