"""The drafter's grammar-aware drafting: forced tokens, drafts cut at the grammar, sampled nodes
redrawn from q restricted to the allowed tokens (a draw from the restricted q, chi-square)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as scipy_stats

from drafter_svc.draft import ROOT, Draft
from drafter_svc.grammar_drafts import GrammarDrafts, graft
from specdec.grammar import GrammarCompiler
from specdec.output_constraint import OutputConstraint

SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"], "additionalProperties": False}


def drafts(compiler: GrammarCompiler, constraint: OutputConstraint, seed: int = 0) -> GrammarDrafts:
    return GrammarDrafts(compiler, compiler.matcher(constraint, "constraint"), frozenset([2]), seed)


def test_forced_tokens_spell_the_fixed_prefix(compiler: GrammarCompiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    grammar = drafts(compiler, OutputConstraint("json_schema", json.dumps(SCHEMA)))
    forced = grammar.forced(16)
    assert tokenizer.decode(forced) == '{"city":"'
    assert grammar.forced(2) == forced[:2]
    grammar.commit(forced)
    assert grammar.forced(16) == []  # Paris or Rome: nothing forced


def test_fit_cuts_disallowed_point_masses_with_their_subtrees(compiler: GrammarCompiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    grammar = drafts(compiler, OutputConstraint("regex", "[0-9]{2}-[a-z]{2}"))
    d, x, dash = (tokenizer.encode(s, add_special_tokens=False)[0] for s in ("4", "x", "-"))
    # root: "4" -> "4" -> "-" -> "x" ; sibling "x" (forbidden) with a child
    draft = Draft.point_masses([d, d, dash, x, x, d], [ROOT, 0, 1, 2, ROOT, 4])
    fitted = grammar.fit(draft)
    assert fitted.token_ids == [d, d, dash, x] and fitted.parents == [ROOT, 0, 1, 2]
    assert grammar.forced(4) == []  # the matcher is back at the start
    assert grammar.fit(Draft.point_masses([x, d])) == Draft.point_masses([])


def test_sampled_nodes_are_draws_from_q_restricted_to_the_grammar(compiler: GrammarCompiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    grammar = drafts(compiler, OutputConstraint("regex", "[0-9]+"), seed=1)
    digits = [tokenizer.encode(s, add_special_tokens=False)[0] for s in "0123"]
    letters = [tokenizer.encode(s, add_special_tokens=False)[0] for s in "ab"]
    ids = digits + letters
    q = np.array([0.1, 0.2, 0.05, 0.15, 0.3, 0.2])
    rng = np.random.default_rng(2)
    counts = dict.fromkeys(digits, 0)
    for _ in range(3000):
        token = int(rng.choice(ids, p=q))
        draft = Draft([token, 7], [ROOT, 0], [ids, [7]], [q.tolist(), [1.0]])
        fitted = grammar.fit(draft)
        assert fitted.q_token_ids[0] == digits and np.allclose(fitted.q_probs[0], q[:4] / q[:4].sum())
        counts[fitted.token_ids[0]] += 1
        if token in letters:
            assert len(fitted) == 1  # redrawn: the child drafted after the old token is cut
    expected = q[:4] / q[:4].sum() * 3000
    assert scipy_stats.chisquare([counts[t] for t in digits], expected).pvalue > 1e-3


def test_graft_puts_the_drafters_tree_under_the_forced_chain() -> None:
    rest = Draft([5, 6, 7], [ROOT, ROOT, 0], [[5, 9], [6], [7]], [[0.5, 0.5], [1.0], [1.0]], confidences=[0.5, 0.4, 0.3])
    tree = graft([1, 2], rest)
    assert tree.token_ids == [1, 2, 5, 6, 7] and tree.parents == [ROOT, 0, 1, 1, 2]
    assert tree.confidences == [1.0, 1.0, 0.5, 0.4, 0.3] and tree.q_probs[2] == [0.5, 0.5]


def test_extend_appends_the_tokens_forced_after_the_first_chain(compiler: GrammarCompiler, tokenizer) -> None:  # type: ignore[no-untyped-def]
    grammar = drafts(compiler, OutputConstraint("json_schema", json.dumps(SCHEMA)))
    head = grammar.forced(16)
    grammar.commit(head)  # '{"city":"'
    paris = tokenizer.encode('Paris', add_special_tokens=False)
    draft = grammar.fit(Draft.point_masses(paris))
    extended = grammar.extend(draft, depth=len(paris) + 8, max_nodes=16)
    assert extended.token_ids[: len(paris)] == paris
    assert tokenizer.decode(extended.token_ids[len(paris):]) == '"}'
    assert grammar.extend(draft, depth=len(paris), max_nodes=16) == draft  # no room
    assert grammar.forced(4) == []  # the matcher is back where it was
