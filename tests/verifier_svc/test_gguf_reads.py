"""gguf_reads.read_once on a tiny GGUF (no tokenizer): one reader and one metadata parse per file
inside, answers that callers may change without changing the next one's, and transformers' and
gguf's own functions back after the outermost exit, an exception's included. The whole
preparation of a GGUF model under it (its tensors read through the shared reader):
tests/verifier_svc/test_gguf_sources.py."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch
import transformers as tf
from transformers import modeling_gguf_pytorch_utils as gguf_utils

from tests.tiny_gguf import write_gguf
from verifier_svc.gguf_reads import read_once


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = tf.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, max_position_embeddings=64)
    return write_gguf(tf.Qwen2ForCausalLM(config), tmp_path_factory.mktemp("gguf") / "tiny.gguf", tokenizer=False)


def originals() -> tuple[object, object, object]:
    return gguf.GGUFReader, gguf_utils.load_gguf_checkpoint, gguf.get_tensor_name_map


def test_inside_a_file_is_read_once_and_answers_are_copies(tiny_gguf: Path) -> None:
    before = originals()
    fresh = gguf_utils.load_gguf_checkpoint(str(tiny_gguf))
    with read_once():
        assert gguf.GGUFReader(str(tiny_gguf)) is gguf.GGUFReader(tiny_gguf)  # a path or its str
        first = gguf_utils.load_gguf_checkpoint(str(tiny_gguf))
        first["config"].pop("model_type")  # as transformers' callers pop keys
        second = gguf_utils.load_gguf_checkpoint(str(tiny_gguf))
        assert second == fresh and "model_type" in second["config"]
        arch = gguf.MODEL_ARCH.QWEN2
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert originals() == before


def test_nested_uses_share_the_outermost_and_an_exception_puts_everything_back(tiny_gguf: Path) -> None:
    before = originals()
    with pytest.raises(RuntimeError, match="stop"), read_once():
        outer = gguf.GGUFReader(str(tiny_gguf))
        with read_once():
            assert gguf.GGUFReader(str(tiny_gguf)) is outer
        assert originals() != before and gguf.GGUFReader(str(tiny_gguf)) is outer  # the inner exit kept them
        raise RuntimeError("stop")
    assert originals() == before
    with read_once():  # a later use reads afresh
        assert gguf.GGUFReader(str(tiny_gguf)) is not outer
