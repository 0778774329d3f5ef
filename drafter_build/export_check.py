"""The check every `specdec draft build` passes before its drafter is used: the ONNX model's
logits against the torch model's own forward, on a fixed sequence of ids run as the drafter
runs it (several cached calls, a token tree, a rollback, one-token steps), through the drafter's
own calls (drafter_svc/draft_cache.py).

Calls, for ids of length n (s1 = n // 3, s2 = 2n // 3):
  1. ids[:s1] from an empty cache;  2. ids[s1:s2] on the returned cache;
  3. a tree of three nodes after ids[:s2]: two siblings ids[s2], ids[s2 + 1] and a child
     ids[s2 + 2] of the first (positions s2, s2, s2 + 1), in one call with a tree mask;
  4. the cache cut back to s2 (the tree dropped), ids[s2:n - 3] in one call, then the last
     three one token a call.
The torch reference is one forward over all ids (every chain position) and one over each tree
node's path, with the model's own masks (causal, its sliding windows).

Tolerances:
- float32 builds: the largest |logit difference| at most FLOAT32_RELATIVE_TOLERANCE x the
  logit scale (the largest |torch logit| over the checked positions, at least 1). float32
  rounding over reordered sums leaves differences of ~1e-6 of the scale (the default model:
  8.9e-5 with the Llama graph, 9.0e-5 generic, on logits up to 40.7); an export that computes
  something else differs by the order of the logits themselves (a dropped q/k norm: 22; a
  dropped logit scale: 66; a window not applied, on the tiny test models: 2.8-5.1), so 1e-3
  leaves two orders of magnitude either side, and moves any ratio of two probabilities by at
  most a factor e^(2e-3 x scale).
- int8 builds (the float32 export checked first): int8 weights move logits by a few percent of
  their scale (the default model: up to 1.6-1.75), so the bound is on what a greedy drafter
  proposes: the fraction of positions whose argmax is torch's, at least INT8_ARGMAX_FLOOR. The
  default model's int8 builds reach 0.970 (Llama graph, 65 of 67 positions) and 0.985 (generic,
  66 of 67): the floor leaves 4-5 positions of margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from drafter_build.onnx_contract import causal_bias
from drafter_svc.draft_cache import DraftCache, call

FLOAT32_RELATIVE_TOLERANCE = 1e-3
INT8_ARGMAX_FLOOR = 0.9
MIN_CHECK_IDS = 12
# The check's text for a target with a tokenizer (its first CHECK_TOKENS tokens): prose, code and
# numbers, so that the positions are ones a drafter meets.
CHECK_TEXT = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding lets a small model draft "
    "tokens that a large model then checks in one pass, so the output follows the large model "
    "exactly. def add(a, b):\n    return a + b\n\nprint(add(2, 40))  # 42\n"
    "In 1969, Apollo 11 landed on the Moon; the crew returned on July 24."
)
CHECK_TOKENS = 64


class ExportCheckFailed(RuntimeError):
    """The ONNX model is not the torch model within the stated tolerance (the message says by how much)."""


@dataclass(frozen=True)
class ExportCheck:
    """The measured agreement of one ONNX build with torch, and whether it passed."""

    precision: str  # "float32" or "int8"
    positions: int
    max_abs_logit_diff: float
    logit_scale: float
    argmax_agreement: float
    passed: bool

    @property
    def bound(self) -> float:
        """float32: the largest |logit difference| allowed; int8: the smallest argmax agreement."""
        return FLOAT32_RELATIVE_TOLERANCE * self.logit_scale if self.precision == "float32" else INT8_ARGMAX_FLOOR

    def describe(self) -> str:
        if self.precision == "float32":
            return (
                f"float32 export: largest |logit difference| from torch {self.max_abs_logit_diff:.3g} "
                f"{'<=' if self.passed else '>'} tolerance {self.bound:.3g} "
                f"({FLOAT32_RELATIVE_TOLERANCE:g} x logit scale {self.logit_scale:.3g}) over {self.positions} positions"
            )
        return (
            f"int8 build: argmax agreement with torch {self.argmax_agreement:.3f} "
            f"{'>=' if self.passed else '<'} floor {self.bound:g} over {self.positions} positions "
            f"(largest |logit difference| {self.max_abs_logit_diff:.3g})"
        )

    def record(self) -> dict[str, object]:
        """The manifest's entry for this check."""
        return {
            "precision": self.precision, "positions": self.positions, "max_abs_logit_diff": _finite(self.max_abs_logit_diff),
            "logit_scale": self.logit_scale, "argmax_agreement": self.argmax_agreement,
            "tolerance": self.bound, "tolerance_rule": _RULES[self.precision], "passed": self.passed,
        }


_RULES = {
    "float32": f"max_abs_logit_diff <= {FLOAT32_RELATIVE_TOLERANCE:g} x logit_scale (largest |torch logit|, at least 1)",
    "int8": f"argmax_agreement >= {INT8_ARGMAX_FLOOR:g}",
}


def check_ids(vocab_size: int, tokenizer=None) -> list[int]:  # type: ignore[no-untyped-def]
    """The check's ids: CHECK_TEXT in the target's tokens where there is a tokenizer, else a
    seeded draw over the vocabulary (MIN_CHECK_IDS or more either way)."""
    ids = tokenizer.encode(CHECK_TEXT)[:CHECK_TOKENS] if tokenizer is not None else []
    if len(ids) < MIN_CHECK_IDS:
        ids = torch.randint(0, vocab_size, (CHECK_TOKENS,), generator=torch.Generator().manual_seed(0)).tolist()
    return [int(t) % vocab_size for t in ids]


def _tree_layout(n: int) -> tuple[int, int]:
    return n // 3, 2 * n // 3


def reference_logits(model: nn.Module, ids: list[int]) -> np.ndarray:
    """[n + 3, vocab] float64: torch's logits at every chain position, then after each tree node's path."""
    if len(ids) < MIN_CHECK_IDS:
        raise ValueError(f"the check needs at least {MIN_CHECK_IDS} ids, got {len(ids)}")
    _, s2 = _tree_layout(len(ids))
    prefix, (a, b, c) = ids[:s2], ids[s2 : s2 + 3]
    with torch.no_grad():
        rows = [model(torch.tensor([ids])).logits[0]]
        rows += [model(torch.tensor([prefix + path])).logits[0, -1:] for path in ([a], [b], [a, c])]
    return torch.cat(rows).double().numpy()


def onnx_logits(onnx_path: Path, ids: list[int], num_layers: int, num_kv_heads: int, head_dim: int, contract: str) -> np.ndarray:
    """[n + 3, vocab] float64: the ONNX model's logits at the same positions, by the calls of the
    module docstring, each made as the drafter makes it (drafter_svc/draft_cache.py) under the
    graph's cache `contract`."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    cache = DraftCache.empty(num_layers, num_kv_heads, head_dim)
    n = len(ids)
    s1, s2 = _tree_layout(n)

    def run(tokens: list[int], positions: list[int], bias: np.ndarray) -> np.ndarray:
        return call(session, contract, cache, np.array(tokens), np.array(positions), bias, np.arange(len(tokens)))

    def chain(start: int, stop: int) -> np.ndarray:
        return run(ids[start:stop], list(range(start, stop)), causal_bias(start, stop - start).numpy()[0, 0])

    first, second = chain(0, s1), chain(s1, s2)
    tree_bias = np.full((3, s2 + 3), np.finfo(np.float32).min, np.float32)
    tree_bias[:, :s2] = 0.0
    for node, seen in enumerate(([0], [1], [0, 2])):  # each node sees the prefix, its ancestors and itself
        tree_bias[node, [s2 + j for j in seen]] = 0.0
    tree = run(ids[s2 : s2 + 3], [s2, s2, s2 + 1], tree_bias)
    cache.truncate(s2)  # the rollback: the cache before the tree
    rows = [first, second, chain(s2, n - 3), *(chain(i, i + 1) for i in range(n - 3, n))]
    return np.concatenate([*rows, tree]).astype(np.float64)


def compare(reference: np.ndarray, measured: np.ndarray, precision: str) -> ExportCheck:
    """The check of `measured` against `reference` (both [positions, vocab]) at `precision`'s tolerance."""
    if precision not in _RULES:
        raise ValueError(f"unknown precision {precision!r}")
    if measured.shape != reference.shape:
        return ExportCheck(precision, len(reference), math.inf, _scale(reference), 0.0, False)
    diff = float(np.abs(measured - reference).max())
    agreement = float((measured.argmax(-1) == reference.argmax(-1)).mean())
    scale = _scale(reference)
    if precision == "float32":
        passed = diff <= FLOAT32_RELATIVE_TOLERANCE * scale  # False for NaN
    else:
        passed = agreement >= INT8_ARGMAX_FLOOR and math.isfinite(diff)
    return ExportCheck(precision, len(reference), diff if math.isfinite(diff) else math.inf, scale, agreement, passed)


def _scale(reference: np.ndarray) -> float:
    return max(1.0, float(np.abs(reference).max()))


def _finite(value: float) -> float | str:
    return value if math.isfinite(value) else "inf"
