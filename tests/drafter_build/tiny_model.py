"""Tiny randomly initialised causal LMs (seconds to export) for the exporter and drafter tests,
built from transformers configs: 3 layers, grouped KV heads, 48 tokens, the head untied and
scaled so that logits spread like a trained model's. `llama` is the target's architecture; the
others exercise what the generic export must keep (q/k norms, fused projections, sliding
windows that matter within the tests' 64 ids, mixed layer types).

`tiny_model_folder` saves one as a transformers folder with a 48-token character-level
tokenizer, for `specdec draft build --model/--from`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, normalizers
from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, Phi3Config, PreTrainedModel, Qwen2Config, Qwen3Config

from drafter_build.build import write_drafter
from drafter_build.export_check import check_ids

VOCAB = 48
FINGERPRINT = "tiny-test-tokenizer"
HEAD_SCALE = 8.0  # logits spread like a trained model's: a head of a few likely tokens, a long tail
WINDOW = 8  # shorter than the check's ids: a window that is not applied fails the check
_COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
)
ARCHITECTURES: dict[str, tuple[type, dict[str, Any]]] = {
    "llama": (LlamaConfig, {}),
    # Llama 3's scaled rotary embedding (a fixed table) and dynamic NTK scaling (the table changes with the length).
    "llama-llama3-rope": (LlamaConfig, dict(rope_parameters=dict(
        rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64,
    ))),
    "llama-dynamic-rope": (LlamaConfig, dict(rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0))),
    "qwen2": (Qwen2Config, {}),
    "qwen2-window": (Qwen2Config, dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
    "qwen3": (Qwen3Config, dict(head_dim=16)),
    "gemma3": (Gemma3TextConfig, dict(head_dim=16, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    "phi3": (Phi3Config, dict(pad_token_id=0)),
}
# The tiny tokenizer: one token per character (lower-cased), the rest unknown.
_CHARACTERS = " abcdefghijklmnopqrstuvwxyz0123456789.,():#+\n"
_SPECIALS = ["<unk>", "<s>", "</s>"]


def tiny_model(architecture: str = "llama", seed: int = 0) -> PreTrainedModel:
    torch.manual_seed(seed)
    config_class, extra = ARCHITECTURES[architecture]
    model = AutoModelForCausalLM.from_config(config_class(**_COMMON, **extra), attn_implementation="eager").eval()
    with torch.no_grad():  # random init gives near-uniform logits
        model.lm_head.weight.mul_(HEAD_SCALE)
    return model


def tiny_drafter_folder(out: Path, quantize: bool = False, architecture: str = "llama") -> tuple[PreTrainedModel, Path]:
    model = tiny_model(architecture)
    target = {"source": "tiny", "model_dir": "", "tokenizer_fingerprint": FINGERPRINT, "vocab_size": VOCAB, "eos_token_ids": [0]}
    out.mkdir(parents=True, exist_ok=True)
    return model, write_drafter(model, out, kind="small", quantize=quantize, target=target, seed=0, check_ids=check_ids(VOCAB))


def tiny_tokenizer(characters: str = _CHARACTERS) -> Tokenizer:
    """A character-level tokenizer of VOCAB tokens (`characters` and three specials)."""
    vocab = {token: i for i, token in enumerate([*_SPECIALS, *characters])}
    assert len(vocab) == VOCAB, len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    return tokenizer


def tiny_model_folder(out: Path, architecture: str = "llama", seed: int = 0, characters: str = _CHARACTERS) -> Path:
    """A transformers folder (config, weights, tokenizer.json) of tiny_model(architecture, seed)."""
    tiny_model(architecture, seed).save_pretrained(str(out))
    tiny_tokenizer(characters).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return out
