"""The llama.cpp peers run the model the verifier serves, at its width: the shipped Q4_1 GGUF
re-typed by llama.cpp holds exactly the values the verifier dequantizes, and llama.cpp's greedy
output on it is transformers' own. Skipped where llama-cpp-python is not installed (an optional
extra that compiles llama.cpp)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")

from bench.llama_cpp_peers import LlamaCppSystem, retyped_gguf  # noqa: E402
from bench.peers import HFModel, HFSystem  # noqa: E402
from bench.systems import Decoding  # noqa: E402
from specdec.model_files import default_gguf, tokenizer_dir  # noqa: E402
from specdec.tokenizer import Tokenizer  # noqa: E402

SAMPLE_TENSORS = ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight")


@pytest.fixture(scope="module")
def f32_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECDEC_CACHE_DIR", str(cache))
        made = retyped_gguf(default_gguf(), "float32")
        stamp = made.stat().st_mtime_ns
        assert retyped_gguf(default_gguf(), "float32") == made and made.stat().st_mtime_ns == stamp  # made once
    assert made.is_relative_to(cache) and not list(made.parent.glob("*.partial-*"))
    return made


def test_the_f32_file_holds_the_values_the_verifier_dequantizes(f32_gguf: Path) -> None:
    shipped = {t.name: t for t in gguf.GGUFReader(str(default_gguf())).tensors}
    retyped = {t.name: t for t in gguf.GGUFReader(str(f32_gguf)).tensors}
    assert set(retyped) == set(shipped)
    assert {t.tensor_type.name for t in retyped.values()} == {"F32"}
    for name in SAMPLE_TENSORS:
        expected = gguf.dequantize(shipped[name].data, shipped[name].tensor_type)
        np.testing.assert_array_equal(np.asarray(retyped[name].data).reshape(expected.shape), expected)


@pytest.mark.slow
def test_llama_cpp_greedy_output_on_the_f32_file_is_transformers_own(f32_gguf: Path) -> None:
    # Long enough to prefill in more than one of llama.cpp's 512-token batches.
    story = "The cat sat on the mat and looked at the dog, who was asleep by the door. " * 40
    messages = [{"role": "user", "content": f"{story}\nWhat did the cat look at?"}]
    greedy = Decoding(max_new_tokens=12, temperature=0.0, seed=None)
    reference = HFSystem("hf-generate", HFModel()).generate(messages, greedy)
    assert reference.prompt_tokens > 600 and len(reference.token_ids) > 0
    tokenizer = Tokenizer(tokenizer_dir("default"))
    for prompt_lookup in (False, True):
        peer = LlamaCppSystem("llama-cpp", f32_gguf, tokenizer, prompt_lookup=prompt_lookup)
        ours = peer.generate(messages, greedy)
        assert ours.prompt_tokens == reference.prompt_tokens
        assert ours.token_ids == reference.token_ids, f"prompt lookup {prompt_lookup}"
