"""A tiny randomly initialised LlamaForCausalLM (seconds to export) for the exporter and drafter
tests: the same architecture as the target (GQA), 3 layers, 48 tokens."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from drafter_build.build import write_drafter

VOCAB = 48
FINGERPRINT = "tiny-test-tokenizer"
NORM_SCALE = 8.0  # logits spread like a trained model's: a head of a few likely tokens, a long tail


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # random init gives near-uniform logits
        model.model.norm.weight.mul_(NORM_SCALE)
    return model


def tiny_drafter_folder(out: Path, quantize: bool = False) -> tuple[LlamaForCausalLM, Path]:
    model = tiny_model()
    target = {"source": "tiny", "model_dir": "", "tokenizer_fingerprint": FINGERPRINT, "vocab_size": VOCAB, "eos_token_ids": [0]}
    out.mkdir(parents=True, exist_ok=True)
    return model, write_drafter(model, out, kind="small", quantize=quantize, target=target, seed=0)
