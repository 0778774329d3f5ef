"""Token masks for a round's token tree from a grammar matcher, and the masked distributions.

The target distribution under a constraint, at any position, is the standardized p restricted to
the tokens the grammar allows after that position's own prefix and renormalized; greedy takes the
argmax of the masked logits. Row 0 of a round scores the position after the committed tokens;
row i+1 the position after node i, whose prefix is the committed tokens and node i's path. So
the mask of row i+1 comes from the session's matcher advanced along node i's path: a walk down
the tree that consumes a node's token on the way down and rolls it back on the way up (one
matcher, forked per branch by rollback).

A node whose token its parent's row does not allow has p(x) = 0: the acceptance rule never
accepts it, so neither it nor its subtree can be on the accepted path; their rows allow every
token (they are never sampled from), as do rows after an EOS token, past the generation's end.
"""

from __future__ import annotations

import llguidance
import numpy as np
import torch

from specdec.grammar import GrammarCompiler
from verifier_svc.token_tree import ROOT, TokenTree


def tree_masks(compiler: GrammarCompiler, matcher: llguidance.LLMatcher, tree: TokenTree, eos_token_ids: frozenset[int]) -> torch.Tensor:
    """[n+1, vocab] bool: row 0 the tokens allowed after the matcher's state, row i+1 those
    allowed after node i's path. The matcher ends in the state it started in."""
    n = len(tree)
    masks = np.ones((n + 1, compiler.vocab_size), dtype=bool)
    masks[0] = compiler.allowed_tokens(matcher)
    tokens = tree.tokens.tolist()
    # Depth-first; each frame: (node, entered) - entered: its token was consumed on the way down.
    stack: list[tuple[int, bool]] = [(child, False) for child in reversed(tree.children_of(ROOT))]
    parent_row = {ROOT: 0}
    while stack:
        node, entered = stack.pop()
        if entered:
            matcher.rollback(1)
            continue
        parent = int(tree.parents[node])
        row = parent_row.get(parent)
        token = tokens[node]
        if row is None or not masks[row, token] or token in eos_token_ids:
            continue  # unreachable, or past the end: its row and its subtree's stay all-allowed
        if not matcher.consume_token(token):
            raise RuntimeError(f"the grammar matcher refused token {token} that its mask allowed: {matcher.get_error()}")
        masks[node + 1] = compiler.allowed_tokens(matcher)
        parent_row[node] = node + 1
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(tree.children_of(node)))
    return torch.from_numpy(masks)


def masked_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """logits [n, vocab] with -inf where allowed [n, vocab] is False (a new tensor)."""
    return logits.masked_fill(~allowed, float("-inf"))


def restrict(probs: torch.Tensor, allowed: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """probs [n, vocab] restricted to allowed [n, vocab] and renormalized, row by row. A row
    whose allowed tokens have no mass under probs (top-k or top-p removed them all) takes that
    row of `fallback` [n, vocab] (the distribution standardized from the masked logits) instead."""
    kept = probs.masked_fill(~allowed, 0.0)
    mass = kept.sum(-1, keepdim=True)  # [n, 1]
    empty = mass <= 0
    return torch.where(empty, fallback, kept / mass.where(~empty, 1.0))
