"""Token trees: the tensors of one tree-masked target pass (SpecInfer; Stratos, section 2.1).

A round's drafts form a tree rooted at the last committed token. Node i has a token and a parent
(ROOT, or an earlier node: parents come before their children). Like Medusa's buffers, the tree
becomes plain tensors: which nodes each node may attend to, the position of each node, and the
root-to-leaf paths. A chain is the tree whose node i has parent i - 1, and its mask is causal.

Pure functions over tensors and lists, no model: the target pass (target_model.py) consumes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

ROOT = -1  # the parent of a node that directly follows the last committed token


@dataclass(frozen=True)
class TokenTree:
    """A validated token tree of n nodes (n may be 0)."""

    tokens: torch.Tensor  # [n] int64
    parents: torch.Tensor  # [n] int64, ROOT or an earlier node
    depths: torch.Tensor  # [n] int64, 1 for a child of the root
    # [n, n] bool: ancestors[i, j] iff node j is node i or one of its ancestors.
    ancestors: torch.Tensor
    # children[node + 1]: the children of `node` (ROOT -> index 0), in node order.
    children: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def children_of(self, node: int) -> tuple[int, ...]:
        return self.children[node + 1]

    def depth(self) -> int:
        """The longest root-to-leaf path, in nodes (0 for an empty tree)."""
        return int(self.depths.max()) if len(self) else 0

    def paths(self) -> torch.Tensor:
        """[num_leaves, depth()] int64: each root-to-leaf path as node indices, padded with ROOT."""
        leaves = [i for i in range(len(self)) if not self.children_of(i)]
        paths = torch.full((len(leaves), self.depth()), ROOT, dtype=torch.long)
        for row, leaf in enumerate(leaves):
            path = self.ancestors[leaf].nonzero().squeeze(1)  # ancestors precede: already root-first
            paths[row, : path.numel()] = path
        return paths


def build_tree(tokens: Sequence[int], parents: Sequence[int]) -> TokenTree:
    """The tree of nodes (tokens[i], parents[i]); parents[i] must be ROOT or < i (the caller
    validates: see session.py)."""
    n = len(tokens)
    assert len(parents) == n and all(ROOT <= p < i for i, p in enumerate(parents)), "parents must precede children"
    # Python lists, each turned into a tensor once: a tree is small and built every round, and
    # element-wise tensor writes cost more than the lists.
    ancestor_rows: list[list[bool]] = []  # row i: node i's ancestors and itself
    depths: list[int] = []
    children: list[list[int]] = [[] for _ in range(n + 1)]
    for i, parent in enumerate(parents):
        children[parent + 1].append(i)
        row = ancestor_rows[parent].copy() if parent != ROOT else [False] * n
        row[i] = True
        ancestor_rows.append(row)
        depths.append(depths[parent] + 1 if parent != ROOT else 1)
    return TokenTree(
        tokens=torch.tensor(list(tokens), dtype=torch.long),
        parents=torch.tensor(list(parents), dtype=torch.long),
        depths=torch.tensor(depths, dtype=torch.long),
        ancestors=torch.tensor(ancestor_rows, dtype=torch.bool).reshape(n, n),
        children=tuple(tuple(c) for c in children),
    )


def chain(tokens: Sequence[int]) -> TokenTree:
    """The tree with one child per node."""
    return build_tree(tokens, list(range(ROOT, len(tokens) - 1)))


def tree_attention_mask(tree: TokenTree, num_cached: int, num_pending: int) -> torch.Tensor:
    """[num_pending + n, num_cached + num_pending + n] bool: which keys each query of the pass sees.

    The pass runs over the pending tokens (committed but not yet cached; the last one is the
    root) and then the n nodes. Pending tokens see the cache and the pending tokens up to
    themselves (causal); a node sees the cache, all pending tokens, its ancestors and itself.
    """
    n = len(tree)
    rows, keys = num_pending + n, num_cached + num_pending + n
    mask = torch.zeros(rows, keys, dtype=torch.bool)
    mask[:, : num_cached] = True
    mask[:num_pending, num_cached : num_cached + num_pending] = torch.ones(num_pending, num_pending, dtype=torch.bool).tril()
    mask[num_pending:, num_cached : num_cached + num_pending] = True
    mask[num_pending:, num_cached + num_pending :] = tree.ancestors
    return mask


def tree_position_ids(tree: TokenTree, num_cached: int, num_pending: int) -> torch.Tensor:
    """[num_pending + n] int64: pending tokens continue the sequence; a node sits at the root's
    position plus its depth."""
    root = num_cached + num_pending - 1
    return torch.cat([torch.arange(num_cached, root + 1), root + tree.depths])
