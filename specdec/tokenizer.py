"""The model's tokenizer without torch or transformers: `tokenizers` plus the Jinja chat template.

Both services load the same files; the fingerprint lets a drafter prove it tokenizes exactly
as the verifier's model expects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import jinja2
import jinja2.sandbox
import tokenizers


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


class Tokenizer:
    """Encode, decode and render chat prompts like transformers' fast tokenizer does."""

    def __init__(self, folder: Path) -> None:
        self._tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = _read_json(folder / "tokenizer_config.json")
        template = config.get("chat_template")
        if (folder / "chat_template.jinja").is_file():
            template = (folder / "chat_template.jinja").read_text()
        self._special = {k: config.get(k) for k in ("bos_token", "eos_token")}
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = _raise_exception
        self._template = env.from_string(template) if isinstance(template, str) else None
        self.eos_token_ids = _eos_ids(folder, config, self._tok)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.fingerprint = _fingerprint(self._tok)

    def to_json(self) -> str:
        """The tokenizer as tokenizer.json text (what llguidance builds its token trie from)."""
        return self._tok.to_str()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=False)

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        """The chat template applied with the assistant turn opened (add_generation_prompt)."""
        if self._template is None:
            raise ValueError("this model has no chat template")
        return self._template.render(messages=list(messages), add_generation_prompt=True, **self._special)

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.encode(self.render_chat(messages), add_special_tokens=False)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _eos_ids(folder: Path, config: dict, tok: tokenizers.Tokenizer) -> list[int]:
    """EOS ids from generation_config.json (int or list), else the tokenizer's eos_token."""
    ids = _read_json(folder / "generation_config.json").get("eos_token_id")
    if ids is None:
        ids = tok.token_to_id(config["eos_token"]) if config.get("eos_token") else []
    return sorted(set(ids if isinstance(ids, list) else [ids]))


def _fingerprint(tok: tokenizers.Tokenizer) -> str:
    """sha256 of what decides token ids: the vocabulary, the merges and the added tokens."""
    spec = json.loads(tok.to_str())
    model = spec.get("model", {})
    canonical = {
        "type": model.get("type"),
        "vocab": sorted(tok.get_vocab(with_added_tokens=True).items()),
        "merges": model.get("merges"),
        "added": sorted((t["id"], t["content"], t["special"]) for t in spec.get("added_tokens", [])),
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
