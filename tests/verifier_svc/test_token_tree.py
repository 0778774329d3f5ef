"""token_tree: the mask, positions and paths of a tree pass, on hand-checked trees."""

from __future__ import annotations

import torch

from verifier_svc.token_tree import ROOT, build_tree, chain, tree_attention_mask, tree_position_ids

# Stratos' section 2.1 example: context (a, b), drafts (c, d), (c, e), (f, g), (f, h) packed as a
# prefix tree; node order c, d, e, f, g, h (parents before children).
EXAMPLE_TOKENS = [3, 4, 5, 6, 7, 8]
EXAMPLE_PARENTS = [ROOT, 0, 0, ROOT, 3, 3]


def test_structure_of_the_example_tree() -> None:
    tree = build_tree(EXAMPLE_TOKENS, EXAMPLE_PARENTS)
    assert len(tree) == 6 and tree.depth() == 2
    assert tree.depths.tolist() == [1, 2, 2, 1, 2, 2]
    assert tree.children_of(ROOT) == (0, 3) and tree.children_of(0) == (1, 2) and tree.children_of(4) == ()
    assert tree.paths().tolist() == [[0, 1], [0, 2], [3, 4], [3, 5]]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 1, 0, 1],
    ], dtype=torch.bool)
    assert torch.equal(tree.ancestors, expected)


def test_mask_and_positions_of_a_pass_with_cached_and_pending_tokens() -> None:
    tree = build_tree(EXAMPLE_TOKENS, EXAMPLE_PARENTS)
    mask = tree_attention_mask(tree, num_cached=3, num_pending=2)  # [2 + 6, 3 + 2 + 6]
    assert mask.shape == (8, 11)
    assert mask[:, :3].all()  # everything sees the cache
    assert mask[:2, 3:5].tolist() == [[True, False], [True, True]]  # pending tokens: causal
    assert not mask[:2, 5:].any()  # pending tokens never see the drafts
    assert mask[2:, 3:5].all()  # every node sees all pending tokens (the root is the last one)
    assert torch.equal(mask[2:, 5:], tree.ancestors)
    # The root (last pending token) is at position 4; nodes at 4 + depth.
    assert tree_position_ids(tree, num_cached=3, num_pending=2).tolist() == [3, 4, 5, 6, 6, 5, 6, 6]


def test_a_chain_is_the_causal_mask() -> None:
    tree = chain([9, 8, 7, 6])
    assert tree.parents.tolist() == [ROOT, 0, 1, 2] and tree.depth() == 4
    assert tree.paths().tolist() == [[0, 1, 2, 3]]
    mask = tree_attention_mask(tree, num_cached=2, num_pending=1)
    causal = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)
    assert torch.equal(mask, causal)
    assert tree_position_ids(tree, num_cached=2, num_pending=1).tolist() == [2, 3, 4, 5, 6]


def test_an_empty_tree_is_a_plain_step() -> None:
    tree = chain([])
    assert len(tree) == 0 and tree.depth() == 0 and tree.children_of(ROOT) == ()
    assert tree.paths().shape == (0, 0)
    assert torch.equal(tree_attention_mask(tree, 0, 3), torch.ones(3, 3, dtype=torch.bool).tril())
    assert tree_position_ids(tree, 0, 3).tolist() == [0, 1, 2]


def test_repeated_sibling_tokens_stay_separate_nodes() -> None:
    tree = build_tree([5, 5, 6], [ROOT, ROOT, 1])
    assert tree.children_of(ROOT) == (0, 1) and tree.paths().tolist() == [[0, ROOT], [1, 2]]
    assert not tree.ancestors[2, 0] and tree.ancestors[2, 1]
