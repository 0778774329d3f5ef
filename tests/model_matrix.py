"""The architectures the verifier is tested on: tiny seeded random-weight models built from
transformers configs, sharing the default model's tokenizer (its vocabulary and special ids).

Each model has 2-4 layers and a 64-wide hidden state. Weights are drawn at initializer_range
0.1 (transformers' 0.02 leaves attention nearly uniform, so windows and soft caps would barely
move a logit), the output head is untied from the embeddings and scaled so that the model's
logits have a standard deviation of about LOGIT_STD (greedy output is not one repeated token,
and temperature-1 sampling has a few likely tokens). Windows are WINDOW tokens, shorter than
the tests' sequences, so a wrong window changes tokens.

`python -m tests.model_matrix --markdown` prints docs/supported-models.md.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedModel

from specdec.model_files import tokenizer_dir
from verifier_svc.token_tree import TokenTree

WINDOW = 16
LOGIT_STD = 3.0
VOCAB, BOS, EOS = 49152, 1, 2  # the default tokenizer's
COMMON = dict(vocab_size=VOCAB, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=EOS, tie_word_embeddings=False, initializer_range=0.1)
LLAMA_LIKE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, **COMMON,
)
GEMMA = dict(LLAMA_LIKE, head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW, attn_logit_softcapping=1.0, final_logit_softcapping=10.0)


@dataclass(frozen=True)
class Architecture:
    """One row of the matrix: a transformers config and what it exercises."""

    config_class: str
    config: dict
    exercises: tuple[str, ...] = ()
    example: str = ""  # a real model of this architecture

    def build_config(self) -> transformers.PretrainedConfig:
        return getattr(transformers, self.config_class)(**self.config)


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("LlamaConfig", LLAMA_LIKE, ("grouped KV heads",), "Llama 3.x, SmolLM2"),
    "qwen2": Architecture("Qwen2Config", LLAMA_LIKE, ("QKV bias",), "Qwen 2.5"),
    "qwen2-window": Architecture(
        "Qwen2Config", dict(LLAMA_LIKE, num_hidden_layers=3, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
        ("sliding window (mixed layer types)",), "Qwen 2.5 with use_sliding_window",
    ),
    "qwen3": Architecture("Qwen3Config", dict(LLAMA_LIKE, head_dim=16), ("q/k norms",), "Qwen3"),
    "mistral-window": Architecture("MistralConfig", dict(LLAMA_LIKE, head_dim=16, sliding_window=WINDOW), ("sliding window (every layer)",), "Mistral 7B v0.1"),
    "gemma2": Architecture(
        "Gemma2Config", GEMMA, ("sliding window (mixed layer types)", "attention soft cap", "final logit soft cap", "eager attention"), "Gemma 2",
    ),
    "gemma3": Architecture(
        "Gemma3TextConfig",
        dict(GEMMA, num_hidden_layers=3, attn_logit_softcapping=None, layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
        ("sliding window (mixed layer types)", "final logit soft cap", "q/k norms"), "Gemma 3 (text)",
    ),
    "phi3": Architecture("Phi3Config", LLAMA_LIKE, ("fused QKV and gate/up projections",), "Phi-3 mini 128k"),
    "phi3-window": Architecture(
        "Phi3Config", dict(LLAMA_LIKE, sliding_window=WINDOW), ("fused QKV and gate/up projections", "sliding window (every layer)"), "Phi-3 mini 4k",
    ),
    "gpt2": Architecture(
        "GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, n_positions=256, **COMMON), ("learned positions", "fused QKV projection"), "GPT-2",
    ),
    "gpt-neox": Architecture(
        "GPTNeoXConfig", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256, **COMMON),
        ("fused QKV projection", "partial rotary", "parallel residual"), "Pythia",
    ),
    "mixtral": Architecture("MixtralConfig", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2), ("MoE",), "Mixtral 8x7B"),
    "qwen3-moe": Architecture(
        "Qwen3MoeConfig", dict(LLAMA_LIKE, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64), ("MoE", "q/k norms"), "Qwen3-30B-A3B",
    ),
    "granite": Architecture(
        "GraniteConfig", dict(LLAMA_LIKE, logits_scaling=4.0, embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.25),
        ("logit scale", "embedding and residual multipliers"), "Granite 3.x",
    ),
    "cohere": Architecture("CohereConfig", dict(LLAMA_LIKE, logit_scale=0.25), ("logit scale", "parallel residual"), "Command R"),
    "olmo2": Architecture("Olmo2Config", LLAMA_LIKE, ("q/k norms", "post-norms"), "OLMo 2"),
}


def build_model(name: str, seed: int = 0) -> PreTrainedModel:
    """The architecture's tiny model, seeded, its head scaled to logits of std ~LOGIT_STD (eager attention)."""
    config = ARCHITECTURES[name].build_config()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32).eval()
    head = model.get_output_embeddings()
    assert head.weight is not model.get_input_embeddings().weight, f"{name}: the head must be untied"
    ids = torch.randint(3, VOCAB, (1, 48), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        for _ in range(3):  # soft caps make the std sublinear in the scale: a few steps converge
            std = model(ids).logits.std().item()
            head.weight.mul_(LOGIT_STD / std)
    return model


def path_tokens(tree: TokenTree, node: int) -> list[int]:
    """The tokens of a tree node's path from the root, the node's own last."""
    return tree.tokens[tree.ancestors[node]].tolist()  # ancestors precede their children


@torch.inference_mode()
def plain_logits(reference: PreTrainedModel, tokens: list[int]) -> torch.Tensor:
    """The reference's logits after `tokens`, scored as a plain sequence: the tests' expectation for a tree node."""
    return reference(torch.tensor([tokens])).logits[0, -1].float()


def save_model(name: str, folder: Path) -> Path:
    """The architecture's model saved as a transformers folder with the default tokenizer's files."""
    folder.mkdir(parents=True, exist_ok=True)
    build_model(name).save_pretrained(str(folder))
    for item in tokenizer_dir("default").iterdir():
        if item.is_file():
            shutil.copy2(item, folder / item.name)
    return folder


def markdown() -> str:
    """docs/supported-models.md: the matrix as a table."""
    lines = [
        "# Supported models",
        "",
        "<!-- Generated by `python -m tests.model_matrix --markdown`; tests/verifier_svc/test_model_matrix.py checks it is current. -->",
        "",
        "The verifier serves decoder-only transformers models exactly: every architecture below is",
        "tested (tests/verifier_svc/test_model_matrix.py, tests/integration/test_model_matrix_services.py)",
        "with a tiny random-weight model of it: tree passes equal each path scored as a plain sequence,",
        "batched passes equal lone ones, greedy output through the verifier equals transformers'",
        "`generate()` for chains and trees, and seeded sampling is the same batched and alone. How",
        "passes stay exact for every architecture: [design/model-support.md](design/model-support.md).",
        "",
        "| Architecture | transformers config | Example models | Exercises |",
        "|---|---|---|---|",
    ]
    for name, arch in ARCHITECTURES.items():
        lines.append(f"| {name} | `{arch.config_class}` | {arch.example} | {', '.join(arch.exercises)} |")
    lines += [
        "",
        f"Windowed models are tested with a window of {WINDOW} tokens, shorter than the tested sequences.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/supported-models.md")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(), end="")
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
