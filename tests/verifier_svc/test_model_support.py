"""Which models the verifier serves, decided from configs alone (model_support.servable), and the
loading options it checks before starting (--dtype, --device-map)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from specdec.model_files import not_a_source
from verifier_svc.model_loader import (
    ModelNotServable, check_servable, load_model, one_line, placement_error, resolve_dtype, served_name,
)
from verifier_svc.model_support import model_class_name, servable
from verifier_svc.server import option_error
from verifier_svc.settings import VerifierSettings

SMALL = {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4}

SERVED = {
    "llama": tf.LlamaConfig(**SMALL),
    "qwen2 with sliding windows": tf.Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=16, max_window_layers=2),
    "mistral with a window": tf.MistralConfig(**SMALL, sliding_window=16),
    "gemma2": tf.Gemma2Config(**SMALL),
    "gemma3 text (mixed layer types)": tf.Gemma3TextConfig(**SMALL),
    "phi3": tf.Phi3Config(**SMALL),
    "gpt2": tf.GPT2Config(n_layer=2, n_embd=64, n_head=4),
    "gpt-neox": tf.GPTNeoXConfig(**SMALL),
    "mixtral": tf.MixtralConfig(**SMALL),
    "qwen3-moe": tf.Qwen3MoeConfig(**SMALL),
    "granite": tf.GraniteConfig(**SMALL),
    "cohere": tf.CohereConfig(**SMALL),
    "olmo2": tf.Olmo2Config(**SMALL),
}

# (config, what the one-line reason must say)
REFUSED = {
    "mamba": (tf.MambaConfig(), "recurrent state"),
    "rwkv": (tf.RwkvConfig(), "recurrent state"),
    "jamba (attention + mamba)": (tf.JambaConfig(), "recurrent state"),
    "zamba2": (tf.Zamba2Config(), "recurrent state"),
    "qwen3-next (linear attention)": (tf.Qwen3NextConfig(), "recurrent state"),
    "minimax (linear attention, not marked stateful)": (tf.MiniMaxConfig(), "linear_attention"),
    "lfm2 (short convolutions)": (tf.Lfm2Config(num_hidden_layers=4, full_attn_idxs=[1, 3]), "conv"),
    "llama4 (chunked attention)": (tf.Llama4TextConfig(), "chunked_attention"),
    "t5": (tf.T5Config(), "encoder-decoder"),
    "bart": (tf.BartConfig(), "encoder-decoder"),
    "whisper": (tf.WhisperConfig(), "encoder-decoder"),
    "vit (no language model)": (tf.ViTConfig(), "no causal LM head"),
}


@pytest.mark.parametrize("name", SERVED)
def test_decoder_only_attention_models_are_served(name: str) -> None:
    assert servable(SERVED[name]) is None
    check_servable(SERVED[name])


@pytest.mark.parametrize("name", REFUSED)
def test_models_without_a_rollbackable_attention_cache_or_causal_head_are_refused(name: str) -> None:
    config, why = REFUSED[name]
    reason = servable(config)
    assert reason is not None and why in reason and "\n" not in reason
    with pytest.raises(ModelNotServable) as refusal:
        check_servable(config)
    assert str(refusal.value).startswith(f"cannot serve {model_class_name(config)} (model_type {config.model_type!r}): ")


def test_the_refusal_names_the_checkpoints_class() -> None:
    assert model_class_name(tf.MambaConfig(architectures=["MambaForCausalLM"])) == "MambaForCausalLM"
    assert model_class_name(tf.JambaConfig()) == "JambaForCausalLM"  # no architectures: the causal LM class
    assert model_class_name(tf.T5Config()) == "T5Config"  # neither: the config's class


def test_dtype_choices() -> None:
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    assert resolve_dtype("float16", "cuda:1") == torch.float16
    with pytest.raises(ValueError, match="'float64' is not one of auto, float32, bfloat16, float16"):
        resolve_dtype("float64", "cpu")


def test_device_map_needs_cuda_and_a_known_placement() -> None:
    assert placement_error("cpu", "", 0) is None
    assert placement_error("cuda", "auto", 2) is None
    assert placement_error("cuda", "balanced_low_0", 4) is None
    assert "needs --device cuda (got 'cpu'" in (placement_error("cpu", "auto", 0) or "")
    assert "needs --device cuda (got 'cuda:1'" in (placement_error("cuda:1", "auto", 2) or "")
    assert "torch sees none" in (placement_error("cuda", "auto", 0) or "")
    assert "'everywhere' is not one of auto, balanced, balanced_low_0, sequential" in (placement_error("cuda", "everywhere", 2) or "")


def test_options_are_checked_before_starting() -> None:
    assert option_error(VerifierSettings()) is None
    assert option_error(VerifierSettings(dtype="half")) == "--dtype: 'half' is not one of auto, float32, bfloat16, float16"
    assert option_error(VerifierSettings(cuda_compiled="all")) == "--cuda-compiled: 'all' is not one of layers, blocks, none"
    error = option_error(VerifierSettings(device_map="auto"))
    assert error is not None and error.startswith("--device-map: spreads the model over all visible GPUs and needs --device cuda")
    if not torch.cuda.is_available():
        assert option_error(VerifierSettings(device="cuda", device_map="auto")) == "--device-map: needs a CUDA GPU, and torch sees none"


def test_a_device_map_loads_the_same_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """load_model's --device-map path (accelerate's placement instead of .to(device)), run where
    it can run without GPUs: accelerate places the whole model on the CPU."""
    torch.manual_seed(0)
    tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=64, intermediate_size=32, num_key_value_heads=2, **SMALL)).save_pretrained(tmp_path)
    placed = load_model(tmp_path, "cpu", torch.float32, device_map="auto")
    plain = load_model(tmp_path, "cpu", torch.float32)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.equal(placed(ids).logits, plain(ids).logits)
    assert not placed.training


def test_a_source_that_is_neither_says_what_it_is(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "weights.bin").write_bytes(b"")
    assert "nothing exists there" in str(not_a_source(str(tmp_path / "absent")))
    assert "a folder without config.json" in str(not_a_source(str(tmp_path)))
    assert "a file whose name does not end in .gguf" in str(not_a_source(str(tmp_path / "weights.bin")))


def test_served_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "Qwen2.5-7B-Instruct").mkdir()
    assert served_name("default") == "SmolLM2-135M-Instruct"
    assert served_name(str(tmp_path / "Qwen2.5-7B-Instruct")) == "Qwen2.5-7B-Instruct"
    assert served_name(str(tmp_path / "qwen2.5-7b-instruct-q4_k_m.gguf")) == "qwen2.5-7b-instruct-q4_k_m"


def test_one_line() -> None:
    assert one_line(OSError("bad\n  header\tline")) == "OSError: bad header line"
    assert one_line(MemoryError()) == "MemoryError"
    assert one_line(ValueError("x" * 1000), limit=20) == f"ValueError: {'x' * 17}..."
