"""Which waiting rounds share the next target pass.

A batched pass is padded, not ragged (batched_pass.py): B rounds cost B x T token rows, T the
most new tokens of any of them, over B x L cache slots, L the longest cache, each session's
cache copied into that padded tensor in every layer. Two kinds of round pad the others badly:

- a prompt's prefill (hundreds of pending tokens) pads every decode round of its pass to its
  length: one 200-token prefill with seven decode rounds is 1600 rows where 207 are real;
- a session with a long cache pads every other session's cache to its length: measured on this
  project's 2-core CPU (SmolLM2-135M, one decode token each), 8 sessions at 300 cached tokens
  take 78 ms, 7 of them with one at 1,500 take 216 ms, and the same as two passes 86 + 67 ms.

So the waiting rounds are split into groups, each a pass of its own, to minimize the groups'
summed cost by the verifier's pass-time fit (pass_time.py: a + m rows + k slots per pass): the
fixed cost a of one more pass against the padding it saves. Rounds are ordered by cache length
(then pending tokens) and cut into contiguous groups by dynamic programming: with a cost that
grows with each group's largest members, some best split keeps that order. Only pending tokens
count as rows here: drafted nodes are cut, in a pass of several rounds, to the width that pays,
padding included (pass_width.py). Groups over the token budget (rounds x most new tokens, drafts
included) are not allowed, but for a single round.

The group holding the oldest waiting round is the next pass; the others wait for the pass after
it, as rounds over the budget always did, and are split again with whatever arrived meanwhile.

Pure: no threads, no model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WaitingRound:
    new_tokens: int  # pending tokens + drafted nodes
    pending: int  # committed tokens not yet cached: a prompt, or the last token
    cached: int  # entries in the session's cache


def pack(rounds: Sequence[WaitingRound], max_tokens: int, seconds: Callable[[int, int], float]) -> list[int]:
    """Indices (increasing) of the rounds of the next pass: the group holding rounds[0] in the
    cheapest split of `rounds` into passes (module docstring). seconds(rows, slots): a pass's
    cost, rows = rounds x most pending tokens, slots = rounds x longest cache."""
    if not rounds:
        return []
    order = sorted(range(len(rounds)), key=lambda i: (rounds[i].cached, rounds[i].pending, i))
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest split of order[:j]
    start = [0] * (n + 1)  # where the last group of that split starts
    for j in range(1, n + 1):
        pending = cached = longest = 0
        for i in range(j - 1, -1, -1):  # the group order[i:j], grown backwards
            r = rounds[order[i]]
            pending, cached, longest = max(pending, r.pending), max(cached, r.cached), max(longest, r.new_tokens)
            size = j - i
            if size > 1 and size * longest > max_tokens:
                break
            cost = best[i] + seconds(size * pending, size * cached)
            if cost < best[j]:
                best[j], start[j] = cost, i
    j = n
    while j > 0:
        group = order[start[j] : j]
        if 0 in group:
            return sorted(group)
        j = start[j]
    raise AssertionError("every round is in some group")
