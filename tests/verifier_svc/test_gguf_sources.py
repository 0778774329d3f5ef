"""GGUF sources of other architectures than the default model's Llama: a Qwen2 GGUF is read
(config from its metadata, dequantized once into the cache, tokenizer converted) into the same
model, its metadata parsed once (gguf_reads.py), and a Mamba GGUF is refused from its metadata
before anything is dequantized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest
import torch
import transformers as tf

from specdec.tokenizer import Tokenizer
from tests.tiny_gguf import write_gguf
from verifier_svc.model_loader import ModelNotServable, open_model


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_qwen2_gguf_loads_as_the_model_it_was_written_from(
    tmp_path: Path, tokenizer: Tokenizer, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tokenizer` (the suite's default one, made in the usual cache before `cache` moves it) is
    what the GGUF's copied tokenizer must convert to."""
    torch.manual_seed(0)
    config = tf.Qwen2Config(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=512,
    )
    source = tf.Qwen2ForCausalLM(config).eval()
    gguf_file = write_gguf(source, tmp_path / "tiny-qwen2.gguf")

    reader_class, opened = gguf.GGUFReader, []

    def counted(path: Any, mode: str = "r") -> gguf.GGUFReader:
        opened.append(path)
        return reader_class(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", counted)
    model, folder = open_model(str(gguf_file), "cpu", torch.float32)
    # Its config, its tensors and its tokenizer from one reader; transformers' own is back after.
    assert opened == [str(gguf_file)] and gguf.GGUFReader is counted
    assert type(model) is tf.Qwen2ForCausalLM and folder.is_relative_to(cache)
    assert model.config.num_key_value_heads == 2 and not model.config.tie_word_embeddings
    ids = torch.tensor([[1, 5, 900, 33, 7000, 48000]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, source(ids).logits, atol=1e-5)
    text = "Hello world, the quick brown fox.\ndef f(x):\n    return x"
    assert Tokenizer(folder).encode(text) == tokenizer.encode(text)


def test_a_mamba_gguf_is_refused_before_it_is_dequantized(tmp_path: Path, cache: Path) -> None:
    torch.manual_seed(0)
    source = tf.MambaForCausalLM(tf.MambaConfig(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2))
    gguf_file = write_gguf(source, tmp_path / "tiny-mamba.gguf", tokenizer=False)
    with pytest.raises(ModelNotServable, match=r"^cannot serve MambaForCausalLM \(model_type 'mamba'\): .*recurrent state"):
        open_model(str(gguf_file), "cpu", torch.float32)
    assert not (cache / "models").exists()
