"""The argmax of a float32 output head's logits from a quarter of its bytes: an int8 copy of the
head bounds every logit, and only the tokens whose bound reaches the best lower bound are scored
in float32 (greedy rounds that read nothing but each row's argmax; docs/design/greedy-head.md).

Each hidden row h is written as x = r1 a1 + r2 a2, two int8 vectors r (|r| <= 127) with scales
a1 = max|h| / 127 and a2 = max|h - r1 a1| / 127 (the second level takes the first one's
rounding, so x is within ~(1/127)^2 of h), and each head row w_v as q_v s_v, int8 values with one
scale a row. The integer products r . q_v are exact, so a_v = s_v (a1 r1 . q_v + a2 r2 . q_v) is
x . q_v s_v up to a few float32 roundings, and the float32 logit fl(h . w_v) lies within

    B_v = ||h|| C_v + ||h - x|| N_v,   C_v = (||w_v - q_v s_v|| + ROUNDING N_v) SLACK,   N_v = max(||w_v||, ||q_v s_v||) SLACK

of a_v: the weights' int8 rounding and the activations' (Cauchy-Schwarz on each), and per unit of
||h|| N_v the float32 roundings of the logit's sums, of a_v's products and of h - x (ROUNDING).
A token v with a_v + B_v below max_u (a_u - B_u) has a float32 logit below that token u's, so
it is not the argmax; the rest (the candidates: a few a row on the default model) are scored in
float32 from the head itself (`rescored`). The bound is computed where the product runs (the
verifier's onnxruntime step: backends/greedy_filter.py) from the tables made here. Pure
arithmetic: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from verifier_svc.int8_weights import int8_per_channel

# Per unit of ||h|| N_v: the logit's float32 sums (at most (in + 2) 2^-24, in any order) are
# added in greedy_head_tables; this covers a_v's four float32 roundings and h - x's three (each
# at most 2^-24 of a term of norm <= 2 ||h||), with room to spare.
ROUNDING = 2.0**-19
# Norms and tables held in float32 are rounded too: every term is widened by this factor.
SLACK = 1.001
# Past this many candidates in a row (a hidden state the bound cannot narrow: all zeros, or
# non-finite values) the row is scored by the whole float32 head.
MAX_CANDIDATES = 4096
# The activations' int8 values span [-LEVELS, LEVELS] (the head's: int8_weights.int8_per_channel).
LEVELS = 127


@dataclass(frozen=True)
class GreedyHeadTables:
    """What the bound reads of a head [vocab, in] (all but `values` [vocab] float32)."""

    values: torch.Tensor  # [in, vocab] int8: q_v as column v (the product's right-hand side)
    scales: torch.Tensor  # s_v
    weight_terms: torch.Tensor  # C_v, per unit of ||h||
    row_norms: torch.Tensor  # N_v, per unit of ||h - x||


def greedy_head_tables(weight: torch.Tensor) -> GreedyHeadTables:
    """The tables of a float32 head `weight` [vocab, in], quantized as the int8 weights are
    (int8_per_channel, float32 scales)."""
    values, scales = int8_per_channel(weight, torch.float32)
    wide = weight.detach().double()
    served = values.double() * scales.double()[:, None]
    norms = torch.maximum(wide.norm(dim=1), served.norm(dim=1))
    sums = (weight.shape[1] + 2) * 2.0**-24
    return GreedyHeadTables(
        values=values.T.contiguous(),
        scales=scales,
        weight_terms=(((wide - served).norm(dim=1) + (ROUNDING + sums) * norms) * SLACK).float(),
        row_norms=(norms * SLACK).float(),
    )


def rescored(weight: np.ndarray, hidden: np.ndarray, candidates: np.ndarray) -> torch.Tensor:
    """[k, vocab] float32 from float32 rows hidden [k, in], the head `weight` [vocab, in] and the
    bound's candidates [k, vocab] bool: each candidate's float32 logit, -inf for every other
    token, so each row's argmax (ties to the lowest id) is that of hidden @ weight.T. A row with
    no candidate or more than MAX_CANDIDATES, or a non-finite value, is scored whole. numpy, on
    the calling thread: a few small products, where torch would wake its thread team."""
    out = np.full(candidates.shape, -np.inf, dtype=np.float32)
    for row, (h, keep) in enumerate(zip(hidden, candidates)):
        ids = np.flatnonzero(keep)
        if not 0 < len(ids) <= MAX_CANDIDATES or not np.isfinite(h).all():
            out[row] = weight @ h
        else:
            out[row, ids] = weight[ids] @ h
    return torch.from_numpy(out)
