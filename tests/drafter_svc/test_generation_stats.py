"""drafter_svc.generation_stats.Stats: the per-position tallies behind vLLM's per-position acceptance."""

from __future__ import annotations

from drafter_svc.draft import Draft
from drafter_svc.generation_stats import Stats


def test_rounds_are_tallied_by_draft_depth() -> None:
    stats = Stats(prompt_tokens=3, drafter="copy", num_draft_tokens=3, max_tree_nodes=4)
    stats.count_round(Draft.point_masses([5, 6, 7]), accepted=2)  # a chain of 3, 2 accepted
    stats.count_round(Draft.point_masses([5, 6, 8, 9], parents=[-1, 0, 0, 2]), accepted=1)  # a tree of depth 3
    stats.count_round(Draft.point_masses([]), accepted=0)  # nothing drafted: no position reached
    assert (stats.rounds, stats.drafted_tokens, stats.accepted_tokens) == (3, 7, 3)
    assert stats.drafted_by_position == [2, 2, 2]
    assert stats.accepted_by_position == [2, 1, 0]
    proto = stats.to_proto()
    assert list(proto.drafted_by_position) == [2, 2, 2] and list(proto.accepted_by_position) == [2, 1, 0]
