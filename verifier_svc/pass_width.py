"""How wide a batched pass is worth making: the verifier keeps each round's drafted nodes only as
far as the tokens they are expected to add pay for the rows they pad into every round of the pass.

A pass over B rounds is padded to one width T = max_b (pending_b + kept_b) (batched_pass.py).
Without drafts it is T0 = max_b pending_b wide (1 in decode, a prompt's length when a prefill
shares the pass) and takes t0 seconds for its B tokens. Widening it to T >= T0 costs
m B (T - T0) more seconds (m: pass_time.py's marginal seconds of one padded row, paid in every
round), and round b keeps the first k_b(T) = min(n_b, T - pending_b) of its n_b nodes (a prefix
of a token tree is a token tree: round_pass.prune), which add their expected accepted tokens.
The verifier chooses

    T* = argmax_T (B + sum_b G_b(k_b(T))) / (t0 + m B (T - T0))      (ties: the narrower)

the expected-tokens-per-second objective of Leviathan et al. (2023), section 3, taken over the
whole pass, which only the verifier sees: a drafter prices its own nodes and cannot know what
the other rounds of the pass send. Nodes up to T0 are free (the pass is that wide anyway).
Widening never lowers the pass's expected rate below the plain pass's B / t0, by construction.

Expected tokens of node i (node_gains): the probability that it is on the accepted path,
g_i = g_parent alpha (1 - alpha)^r_i (g_root = 1; r_i: earlier siblings, each of which must be
rejected first), alpha being the session's measured acceptance of a node whose parent was
accepted (AcceptanceRate over primary_labels).

Pure: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

ROOT = -1
PRIOR_ALPHA = 0.5  # a new verifier's guess, before any verdict
SESSION_RATE = 0.2  # weight of one label in a session's estimate
GLOBAL_RATE = 0.02  # weight of one label in the verifier-wide estimate (a new session's prior)


def node_gains(parents: Sequence[int], alpha: float) -> list[float]:
    """Per node (parents before children), the probability that it ends on the accepted path."""
    gains: list[float] = []
    siblings: dict[int, int] = {}
    for parent in parents:
        rank = siblings.get(parent, 0)
        siblings[parent] = rank + 1
        # A parent that is not an earlier node: the round is invalid and prepare() refuses it.
        above = 1.0 if parent == ROOT else gains[parent] if 0 <= parent < len(gains) else 0.0
        gains.append(above * alpha * (1.0 - alpha) ** rank)
    return gains


def pass_width(pending: Sequence[int], gains: Sequence[Sequence[float]], plain_seconds: float, row_seconds: float) -> int:
    """T* of the module docstring, for rounds with `pending` tokens each and per-node `gains`."""
    rounds = len(pending)
    base = max(pending)
    widest = max(p + len(g) for p, g in zip(pending, gains))
    best, best_rate = base, 0.0
    for width in range(base, widest + 1):
        tokens = rounds + sum(sum(g[: max(0, width - p)]) for p, g in zip(pending, gains))
        rate = tokens / max(plain_seconds + row_seconds * rounds * (width - base), 1e-12)
        if rate > best_rate * (1.0 + 1e-9):
            best, best_rate = width, rate
    return best


def primary_labels(parents: Sequence[int], acceptance_probs: Sequence[float], accepted: Collection[int]) -> list[float]:
    """acceptance_probs of the primary path (the first child at every level), which is what a
    drafter's own confidence ranks first, as far as the walk reached it: up to and including its
    first node not `accepted`. Nodes past that one were scored on a prefix the target rejected;
    a copy draft's later tokens often still match there, and counting them overstates what a
    node adds (node_gains' alpha is the acceptance of a node whose parent was accepted)."""
    labels: list[float] = []
    at = ROOT
    for i, parent in enumerate(parents):
        if parent == at and i < len(acceptance_probs):
            labels.append(float(acceptance_probs[i]))
            if i not in accepted:
                break
            at = i
    return labels


class AcceptanceRate:
    """An exponentially weighted acceptance rate: each label (min(1, p/q) of one node) moves it
    by `rate` of the difference."""

    def __init__(self, alpha: float = PRIOR_ALPHA, rate: float = SESSION_RATE) -> None:
        self.alpha = alpha
        self.rate = rate

    def update(self, labels: Sequence[float]) -> None:
        for label in labels:
            self.alpha += self.rate * (min(1.0, max(0.0, label)) - self.alpha)
