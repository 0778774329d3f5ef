"""Pass sizes: the token count a lone round's target pass is padded to.

A CPU's BLAS does not get steadily slower with the rows of a matrix product: measured on this
project's 2-core AMD EPYC with torch 2.13's MKL (SmolLM2-135M, a 300-token cache), a pass over
4 tokens takes 64 ms and over 5 tokens 58 ms, over 7 tokens 76 ms and over 8 tokens 64 ms (at a
700-token cache: 94 ms against 77 ms). Padding a pass with tokens that no real token attends to
(target_model.py) leaves every real row's logits as they were, so a pass of r real tokens may run
at whichever size s >= r is fastest. The verifier times passes of 1..K tokens when it starts and
keeps, for each r, that fastest s; a 1-token pass (plain decoding) is never padded.

Pure: no model, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

# A bigger size must be at least this much faster to be worth its padding (timing noise).
MIN_GAIN = 0.03


def fastest_at_least(seconds: Sequence[float], min_gain: float = MIN_GAIN) -> list[int]:
    """seconds[i]: a pass of i + 1 tokens. Returns sizes with sizes[i] = the token count s >=
    i + 1 (at most len(seconds)) whose pass is fastest, taken only when it beats i + 1 tokens by
    more than min_gain; sizes[0] = 1."""
    sizes: list[int] = []
    for i in range(len(seconds)):
        best = min(range(i, len(seconds)), key=lambda j: (seconds[j], j))
        sizes.append(best + 1 if i > 0 and seconds[best] < (1 - min_gain) * seconds[i] else i + 1)
    return sizes
