"""When a generation finishes, and the text each round adds.

A round's emitted tokens end at the first end-of-sequence token (EOS, which is not emitted). The
text is detokenized incrementally and passed through the stop strings (a match: STOP). Otherwise
the generation finishes when it reaches max_new_tokens (LENGTH) or the verifier's context length
(CONTEXT_LENGTH). At a finish the detokenizer's held-back tail is flushed through the stop
strings too, which may still turn the finish into STOP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drafter_svc.detokenizer import IncrementalDetokenizer
from drafter_svc.stop_strings import StopStringMatcher
from specdec.v1 import drafter_pb2

UNFINISHED = drafter_pb2.FINISH_REASON_UNSPECIFIED


@dataclass(frozen=True)
class RoundText:
    token_ids: list[int]  # the round's tokens, up to an EOS
    text: str
    finish: int  # a drafter_pb2 FinishReason; UNFINISHED: the generation goes on


class TextOutput:
    """One generation's text as rounds emit tokens, and its finish rule."""

    def __init__(
        self, decode: Callable[[list[int]], str], prompt_token_ids: Sequence[int], stop: Sequence[str],
        eos_token_ids: frozenset[int], max_new_tokens: int, context_length: int,
    ) -> None:
        self.detokenizer = IncrementalDetokenizer(decode, prompt_token_ids)
        self.stopper = StopStringMatcher(stop)
        self.eos_token_ids = eos_token_ids
        self.max_new_tokens = max_new_tokens
        self.context_length = context_length

    def emit(self, emitted: list[int], generated_tokens: int, context_tokens: int) -> RoundText:
        """The text of a round's `emitted` tokens, after `generated_tokens` generated and
        `context_tokens` in the context before them, and whether that finishes the generation."""
        finish = UNFINISHED
        eos_at = next((i for i, t in enumerate(emitted) if t in self.eos_token_ids), None)
        if eos_at is not None:
            emitted, finish = emitted[:eos_at], drafter_pb2.FINISH_REASON_EOS
        text, stopped = self.stopper.push(self.detokenizer.push(emitted))
        if stopped:
            finish = drafter_pb2.FINISH_REASON_STOP
        elif finish == UNFINISHED:
            finish = self._limit(generated_tokens + len(emitted), context_tokens + len(emitted))
        if finish != UNFINISHED and not stopped:
            tail, stopped = self.stopper.push(self.detokenizer.flush())
            text += tail if stopped else tail + self.stopper.flush()
            finish = drafter_pb2.FINISH_REASON_STOP if stopped else finish
        return RoundText(emitted, text, finish)

    def _limit(self, generated_tokens: int, context_tokens: int) -> int:
        if generated_tokens >= self.max_new_tokens:
            return drafter_pb2.FINISH_REASON_LENGTH
        if context_tokens >= self.context_length:
            return drafter_pb2.FINISH_REASON_CONTEXT_LENGTH
        return UNFINISHED
