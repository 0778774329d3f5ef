"""Each token's bytes, from the model's tokenizer.json (the `tokenizers` package, torch-free):
what OpenAI's logprobs call a token's `bytes`, and its `token` text.

A byte-level BPE vocabulary (GPT-2, Llama 3, SmolLM2: decoder `ByteLevel`) spells bytes as
GPT-2's printable stand-ins; a SentencePiece-style one spells a space as U+2581 and an
unrepresentable byte as `<0xNN>`. A token's text is its bytes decoded as UTF-8, with a byte that
is not part of a whole character written `\\xNN` (a token may end inside a character).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import tokenizers

from specdec.model_files import tokenizer_dir

BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the printable stand-in of each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    stand_ins = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            stand_ins.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, stand_ins)}


class TokenBytes:
    """Bytes and text of token ids under one tokenizer (cached per id)."""

    def __init__(self, tokenizer_json: Path) -> None:
        spec = json.loads(tokenizer_json.read_text())
        self._tok = tokenizers.Tokenizer.from_file(str(tokenizer_json))
        self._byte_level = "ByteLevel" in json.dumps(spec.get("decoder") or {})
        self._byte_decoder = gpt2_byte_decoder()
        self._special = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
        self._cache: dict[int, tuple[bytes, str]] = {}

    def bytes_of(self, token_id: int) -> bytes:
        return self._entry(token_id)[0]

    def text_of(self, token_id: int) -> str:
        return self._entry(token_id)[1]

    def _entry(self, token_id: int) -> tuple[bytes, str]:
        entry = self._cache.get(token_id)
        if entry is None:
            data = self._bytes(token_id)
            entry = self._cache[token_id] = (data, data.decode("utf-8", errors="backslashreplace"))
        return entry

    def _bytes(self, token_id: int) -> bytes:
        piece = self._tok.id_to_token(token_id)
        if piece is None:
            return b""
        if token_id in self._special:
            return piece.encode()
        if self._byte_level and all(c in self._byte_decoder for c in piece):
            return bytes(self._byte_decoder[c] for c in piece)
        match = BYTE_TOKEN.match(piece)
        if match:
            return bytes([int(match.group(1), 16)])
        return piece.replace("\u2581", " ").encode()


class TokenBytesLoader:
    """The tokenizer of a model source (as the drafter's --model takes it), loaded off the event
    loop at the first request that asks for logprobs, then shared."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._loaded: TokenBytes | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> TokenBytes:
        """The loaded tokenizer; OSError or ValueError when the model source has none."""
        async with self._lock:
            if self._loaded is None:
                self._loaded = await asyncio.to_thread(lambda: TokenBytes(tokenizer_dir(self.model) / "tokenizer.json"))
        return self._loaded
