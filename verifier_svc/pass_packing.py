"""Which waiting rounds share a target pass.

A batched pass is padded, not ragged (batched_pass.py): B rounds cost B x T token rows, T the
longest round's new tokens. A prompt's prefill (hundreds of tokens) in the same pass as decode
rounds (one token and a few drafted nodes each) pads every decode round to the prompt's length:
one 200-token prefill with seven decode rounds is 1600 rows where 207 are real. Packing by a
token budget alone (rounds x longest <= max_tokens) still let one decode round ride along with a
250-token prefill, doubling that pass.

So a round joins the pass only while what its pending tokens (those not yet cached: a prompt,
or the last token) add in padded rows beyond their own stays within PADDING_ROWS, about what the
fixed cost of a pass buys in rows (~45 ms against ~2.5 ms a row on this project's CPU,
pass_time.py's priors). Past that, a pass of its own (or with the rounds left over) is cheaper
than the padding, and the round waits for the next pass, as rounds over the token budget always
did. Drafted nodes do not count here: in a pass of several rounds the scheduler cuts them to the
width that pays, padding included (pass_width.py). So decode rounds join each other at once, and
a prefill runs alone or with prompts of a similar length.

The threshold is a constant, not the verifier's online fit of a and m (pass_time.py): that fit
sees decode passes only, whose rows and cache slots both grow with the rounds in them, so it
cannot well tell a row's cost from a slot's. A split of the waiting rounds by that fit (which
also kept long caches from padding short ones) made the load benchmark's throughput swing by up
to half between the two halves of a pair (bench/results/load_bench-20261123-052420).

Pure: no threads, no model.
"""

from __future__ import annotations

from collections.abc import Sequence

PADDING_ROWS = 16


def pack(new_tokens: Sequence[int], pending: Sequence[int], max_tokens: int, max_padding: int = PADDING_ROWS) -> list[int]:
    """Indices (in order) of the rounds that share the next pass, given each waiting round's new
    tokens (pending tokens + drafted nodes) and pending tokens, in arrival order: always the
    first; then each later one whose joining keeps rounds x longest new tokens <= max_tokens and
    whose pending tokens add at most `max_padding` padded rows beyond their own."""
    if not new_tokens:
        return []
    taken, longest, widest = [0], new_tokens[0], pending[0]
    for index in range(1, len(new_tokens)):
        n, p = new_tokens[index], pending[index]
        padding = (len(taken) + 1) * max(widest, p) - len(taken) * widest - p
        if (len(taken) + 1) * max(longest, n) <= max_tokens and padding <= max_padding:
            taken.append(index)
            longest, widest = max(longest, n), max(widest, p)
    return taken
