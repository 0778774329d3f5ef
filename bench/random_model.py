"""A random-weight model of a real model's shape, saved as a transformers folder with the default
tokenizer's files: for timing the engine (`bench/engine.py --model FOLDER`) where the real
weights are not at hand. A pass costs what the shape costs, whatever the weights.

    python -m bench.random_model llama-1b /tmp/llama-1b
    python -m bench.random_model smollm2-135m /tmp/smollm2-135m
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from specdec.model_files import tokenizer_dir

# The default model's shape (SmolLM2-135M), and Llama 3.2 1B's (1.24 B parameters with its own
# vocabulary, 1.07 B with the default tokenizer's), both with tied embeddings.
SHAPES = {
    "smollm2-135m": dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        head_dim=64, max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
    ),
    "llama-1b": dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        head_dim=64, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=True,
    ),
}


def save_random_model(shape: str, folder: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    config = LlamaConfig(vocab_size=49152, bos_token_id=1, eos_token_id=2, **SHAPES[shape])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    for item in tokenizer_dir("default").iterdir():
        if item.is_file() and not (folder / item.name).exists():
            shutil.copy2(item, folder / item.name)
    return folder


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    folder = save_random_model(args.shape, args.folder)
    parameters = sum(t.numel() for t in AutoModelForCausalLM.from_pretrained(str(folder)).parameters())
    print(f"{args.shape}: {parameters / 1e9:.2f} B parameters in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
