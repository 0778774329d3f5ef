"""The drafter's TokenLogprobs in OpenAI's shapes, a block per response (streamed: one per chunk;
whole: one for all tokens; the blocks of a stream concatenated are the whole one).

Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
"bytes"}, ...]}], "refusal": null}`, the alternatives most likely first.
Completions (OpenAI's legacy shape): `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`,
`top_logprobs` a dict per token of the N most likely tokens and the sampled one (so up to N + 1
entries), `text_offset` each token's first character in the generated text.

The numbers are the drafter's: the target's log-softmax before temperature, truncation,
penalties and constraints (docs/usage/structured-output.md). A logprob too small for float32
(-inf) is written -9999.0, as OpenAI writes it, since JSON has no infinity.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Sequence
from typing import Any

from gateway_svc.token_bytes import TokenBytes
from specdec.client import TokenLogprob

FLOOR = -9999.0


def finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else FLOOR


class ChatLogprobs:
    def __init__(self, tokens: TokenBytes) -> None:
        self.tokens = tokens

    def block(self, logprobs: Sequence[TokenLogprob]) -> dict[str, Any]:
        return {"content": [self._entry(lp) for lp in logprobs], "refusal": None}

    def _entry(self, lp: TokenLogprob) -> dict[str, Any]:
        entry = self._alternative(lp.token_id, lp.logprob)
        entry["top_logprobs"] = [self._alternative(token, logprob) for token, logprob in lp.top]
        return entry

    def _alternative(self, token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": self.tokens.text_of(token_id), "logprob": finite(logprob), "bytes": list(self.tokens.bytes_of(token_id))}


class CompletionLogprobs:
    """Keeps the text offset across the blocks of one generation."""

    def __init__(self, tokens: TokenBytes) -> None:
        self.tokens = tokens
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.offset = 0  # characters of the generated text before the next token

    def block(self, logprobs: Sequence[TokenLogprob]) -> dict[str, Any]:
        texts, offsets, tops = [], [], []
        for lp in logprobs:
            texts.append(self.tokens.text_of(lp.token_id))
            offsets.append(self.offset)
            self.offset += len(self.decoder.decode(self.tokens.bytes_of(lp.token_id)))
            top = {self.tokens.text_of(token): finite(logprob) for token, logprob in lp.top}
            top.setdefault(texts[-1], finite(lp.logprob))
            tops.append(top)
        return {"tokens": texts, "token_logprobs": [finite(lp.logprob) for lp in logprobs], "top_logprobs": tops, "text_offset": offsets}
