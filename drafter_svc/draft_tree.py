"""Pure operations on a drafted token tree (a `Draft`): depths, the primary path, cutting a tree
to a shallower depth and fewer nodes, and re-rooting a subtree.

Draft-length policies (policies/) draft once at the longest allowed depth and cut the tree
down to the depth they choose; overlapped drafting (overlap.py) pre-drafts past a guessed bonus
token and keeps the subtree under the token the verifier actually emitted. Nodes keep their
relative order, so parents still come before children, and every node keeps its q and evidence:
a cut or re-rooted tree is an ordinary draft for the verifier.
"""

from __future__ import annotations

from collections.abc import Sequence

from drafter_svc.draft import ROOT, Draft


def node_depths(draft: Draft) -> list[int]:
    """Depth of every node: 1 for a child of the root."""
    depths: list[int] = []
    for parent in draft.parents:
        depths.append(1 if parent == ROOT else depths[parent] + 1)
    return depths


def primary_path(draft: Draft) -> list[int]:
    """The path that follows each node's first child from the root: the chain a drafter puts
    first (its best guess), as node indices."""
    path: list[int] = []
    parent = ROOT
    for i, p in enumerate(draft.parents):
        if p == parent:
            path.append(i)
            parent = i
    return path


def _select(draft: Draft, keep: Sequence[int], parents: Sequence[int]) -> Draft:
    def pick(values: list) -> list:  # type: ignore[type-arg]
        return [values[i] for i in keep] if values else []

    return Draft(
        [draft.token_ids[i] for i in keep],
        list(parents),
        [draft.q_token_ids[i] for i in keep],
        [draft.q_probs[i] for i in keep],
        pick(draft.match_lengths),
        pick(draft.confidences),
        pick(draft.q_entropies),
    )


def cut(draft: Draft, depth: int, max_nodes: int) -> Draft:
    """The nodes at most `depth` deep, the first `max_nodes` of them in node order (a prefix in
    node order of a tree is a tree). The primary path comes first in our drafters' node order,
    so it survives any cut that leaves room for it."""
    if depth < 0 or max_nodes < 0:
        raise ValueError(f"depth and max_nodes must be >= 0, got {depth} and {max_nodes}")
    depths = node_depths(draft)
    keep = [i for i, d in enumerate(depths) if d <= depth][:max_nodes]
    index = {old: new for new, old in enumerate(keep)}
    # A kept node's parent is shallower and earlier, hence kept too, unless max_nodes cut it off:
    # it cannot be, since the parent comes earlier in node order than the child.
    return _select(draft, keep, [ROOT if draft.parents[i] == ROOT else index[draft.parents[i]] for i in keep])


def nodes_within(draft: Draft, depth: int) -> int:
    """How many nodes are at most `depth` deep."""
    return sum(d <= depth for d in node_depths(draft))


def subtree(draft: Draft, node: int) -> Draft:
    """The descendants of `node`, re-rooted: `node` becomes the context's last token, its
    children children of the root."""
    if not 0 <= node < len(draft):
        raise ValueError(f"node {node} is not in a draft of {len(draft)} nodes")
    index: dict[int, int] = {node: ROOT}
    keep: list[int] = []
    parents: list[int] = []
    for i in range(node + 1, len(draft)):
        parent = draft.parents[i]
        if parent in index:
            index[i] = len(keep)
            keep.append(i)
            parents.append(index[parent])
    return _select(draft, keep, parents)


def root_child(draft: Draft, token: int) -> int | None:
    """The child of the root that holds `token`, if any (siblings of a point-mass drafter carry
    distinct tokens; of several, the first)."""
    return next((i for i, (t, p) in enumerate(zip(draft.token_ids, draft.parents)) if p == ROOT and t == token), None)
