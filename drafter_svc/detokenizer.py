"""Incremental detokenization: stream text as tokens arrive, never half a character.

The prefix_offset / read_offset technique of text-generation-inference and vLLM: decode a small
window of already-released tokens together with the new ones and emit the difference from the
window's own decode. Decoders that drop or merge a leading space (SentencePiece's "▁", byte-level
BPE) then see the previous token and space the new text correctly; a token that ends inside a
multi-byte UTF-8 character decodes to U+FFFD and is held back until the character completes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# Tokens of prompt decoded ahead of the first generated one (vLLM uses 5): enough for a decoder
# to see word boundaries, few enough to keep each decode short.
PROMPT_WINDOW = 5

_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turn generated token ids into text deltas.

    `decode` maps ids to text (special tokens kept). With a byte-level tokenizer such as GPT-2's
    or Llama 3's, the concatenation of every `push` result and the final `flush` equals
    decode(generated ids); with a SentencePiece one, a first generated token that starts a word
    keeps the space the prompt context implies.
    """

    def __init__(self, decode: Callable[[list[int]], str], prompt_token_ids: Sequence[int] = ()) -> None:
        self._decode = decode
        self._ids = [int(t) for t in prompt_token_ids[max(0, len(prompt_token_ids) - PROMPT_WINDOW) :]]
        # ids[prefix_offset:read_offset] is the context window, already released as text;
        # ids[read_offset:] is held: generated but not released yet.
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._prefix_text = decode(self._ids) if self._ids else ""

    def push(self, token_ids: Sequence[int]) -> str:
        """The text newly completed by these tokens: empty while they end inside a character."""
        released = []
        for token in token_ids:
            # One token at a time, so the complete characters of a chunk are released even when
            # its last token stops inside a character.
            self._ids.append(int(token))
            released.append(self._release(final=False))
        return "".join(released)

    def flush(self) -> str:
        """Whatever is still held, at the end of generation (U+FFFD for an unfinished character)."""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self._read_offset == len(self._ids):
            return ""
        text = self._decode(self._ids[self._prefix_offset :])
        # A window decode that ends in U+FFFD may be an unfinished character; wait for more bytes.
        if not final and (len(text) <= len(self._prefix_text) or text.endswith(_REPLACEMENT_CHAR)):
            return ""
        delta = text[len(self._prefix_text) :]
        # The released tokens become the next window; dropping older ones keeps decodes short.
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        self._prefix_text = self._decode(self._ids[self._prefix_offset :])
        del self._ids[: self._prefix_offset]
        self._read_offset -= self._prefix_offset
        self._prefix_offset = 0
        return delta
