"""Penalties and biases on a round's target logits, each row from its own context (pure).

Row 0 of a round scores the position after the committed tokens, row i+1 the position after
node i; the context of row i+1 is the prompt, the generated tokens and node i's path (node i
included). Definitions in specdec/penalties.py; order as transformers' generate() applies its
processors: repetition penalty, then frequency and presence penalties, logit bias, min_tokens
and banned tokens. Temperature, top-k, top-p and constraints come after (session.py).
"""

from __future__ import annotations

import torch

from specdec.penalties import Penalties
from verifier_svc.token_tree import TokenTree


def path_counts(tree: TokenTree, vocab_size: int) -> torch.Tensor:
    """[n+1, vocab] float32: row i+1 counts the tokens on node i's path (itself included); row 0 is 0."""
    n = len(tree)
    counts = torch.zeros((n + 1, vocab_size), dtype=torch.float32)
    if n:
        one_hot = torch.zeros((n, vocab_size), dtype=torch.float32).scatter_(1, tree.tokens.unsqueeze(1), 1.0)
        counts[1:] = tree.ancestors.float() @ one_hot
    return counts


def penalized_logits(
    logits: torch.Tensor,
    tree: TokenTree,
    penalties: Penalties,
    seen: torch.Tensor,
    generated_counts: torch.Tensor,
    generated: int,
    eos_token_ids: frozenset[int],
) -> torch.Tensor:
    """logits [n+1, vocab] float32 -> a new [n+1, vocab] tensor with the penalties applied.

    seen [vocab] bool: the tokens of the prompt and of the generated tokens; generated_counts
    [vocab] float32: each token's count among the generated tokens; generated: how many there are.
    """
    vocab = logits.shape[-1]
    scores = logits.float().clone()
    on_path = path_counts(tree, vocab) if len(tree) else torch.zeros((1, vocab))
    counts = generated_counts.unsqueeze(0) + on_path  # [n+1, vocab]
    if penalties.repetition_penalty != 1.0:
        repeated = seen.unsqueeze(0) | (on_path > 0)
        penalty = penalties.repetition_penalty
        scores = torch.where(repeated, torch.where(scores < 0, scores * penalty, scores / penalty), scores)
    if penalties.frequency_penalty or penalties.presence_penalty:
        scores = scores - penalties.frequency_penalty * counts - penalties.presence_penalty * (counts > 0).float()
    if penalties.logit_bias:
        ids = torch.tensor([t for t, _ in penalties.logit_bias], dtype=torch.long)
        biases = torch.tensor([b for _, b in penalties.logit_bias], dtype=torch.float32)
        scores[:, ids] += biases
    if penalties.min_tokens and eos_token_ids:
        depth = torch.cat([torch.zeros(1, dtype=torch.long), tree.depths]) if len(tree) else torch.zeros(1, dtype=torch.long)
        early = (generated + depth) < penalties.min_tokens  # [n+1]
        eos = torch.tensor(sorted(eos_token_ids), dtype=torch.long)
        scores[early.nonzero().squeeze(1).unsqueeze(1), eos.unsqueeze(0)] = float("-inf")
    if penalties.banned_token_ids:
        scores[:, torch.tensor(penalties.banned_token_ids, dtype=torch.long)] = float("-inf")
    return scores
