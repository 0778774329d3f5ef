"""draft_tree: cutting a token tree to a depth and a node budget, re-rooting a subtree, the primary
path; every result is a well-formed draft that keeps each node's q and evidence."""

from __future__ import annotations

from drafter_svc.draft_tree import cut, node_depths, nodes_within, primary_path, root_child, subtree
from drafter_svc.draft import ROOT, Draft

# Tokens 10..16:          10 -> 11 -> 12 -> 13       (the primary chain: nodes 0, 1, 2, 3)
#                          |      `-> 14              (node 4, under node 1)
#                          15 -> 16                   (nodes 5, 6: a second root child)
TREE = Draft.point_masses([10, 11, 12, 13, 14, 15, 16], [ROOT, 0, 1, 2, 1, ROOT, 5], match_lengths=[4, 4, 4, 4, 3, 2, 2])


def test_depths_and_primary_path() -> None:
    assert node_depths(TREE) == [1, 2, 3, 4, 3, 1, 2]
    assert primary_path(TREE) == [0, 1, 2, 3]
    assert nodes_within(TREE, 2) == 4
    assert primary_path(Draft.point_masses([])) == []


def test_cut_keeps_shallow_nodes_in_order_within_the_budget() -> None:
    shallow = cut(TREE, 2, 10)
    assert shallow.token_ids == [10, 11, 15, 16]
    assert shallow.parents == [ROOT, 0, ROOT, 2]
    assert shallow.match_lengths == [4, 4, 2, 2]
    assert cut(TREE, 3, 3) == Draft.point_masses([10, 11, 12])  # the primary chain comes first
    assert cut(TREE, 0, 10) == Draft.point_masses([])
    assert cut(TREE, 8, 8) == TREE


def test_subtree_is_re_rooted() -> None:
    under_11 = subtree(TREE, 1)
    assert under_11.token_ids == [12, 13, 14]
    assert under_11.parents == [ROOT, 0, ROOT]
    assert under_11.match_lengths == [4, 4, 3]
    assert subtree(TREE, 5) == Draft.point_masses([16])
    assert len(subtree(TREE, 6)) == 0


def test_root_child() -> None:
    assert root_child(TREE, 15) == 5
    assert root_child(TREE, 11) is None  # not a child of the root
