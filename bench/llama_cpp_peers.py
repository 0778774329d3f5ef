"""Peers: llama.cpp (through llama-cpp-python) on the model the verifier serves, at its dtype.

The verifier dequantizes the default GGUF (Q4_1) and serves it in float32 (or the `--dtype`
asked). llama.cpp gets the same values at the same width: the shipped GGUF re-typed by
llama.cpp's own quantizer (`llama_model_quantize`, requantizing allowed) to F32, BF16 or F16
(with the verifier's int8 weights, to Q8_0: int8 values too, with llama.cpp's own scales, one
per 32 weights: the same width, not the same values),
written once under `<cache>/llama-cpp/`. A peer on the shipped Q4_1 reads a quarter of the
bytes a float32 pass reads; comparing the two measures the weights' width, not the engines.

`llama-cpp` is plain decoding; `llama-cpp-prompt-lookup` uses llama-cpp-python's prompt lookup
draft (`LlamaPromptLookupDecoding`), its built-in n-gram drafter. Both get the token ids our
services see (the same chat template) and sample from the same distribution: temperature as
asked, top-k and top-p off, min-p and repeat penalty off (llama.cpp's defaults are not). The time
to first token is when its generator yields the first token.

llama-cpp-python compiles llama.cpp from source on install (about 20 minutes on a 2-core CPU),
so it is an optional extra (`pip install -e '.[llama]'`, once; pip caches the built wheel).
`llama_cpp_peers()` returns no peers, with the reason, when it is not installed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.systems import Decoding, Output
from specdec.model_files import cache_root, default_gguf
from specdec.tokenizer import Tokenizer

PROMPT_LOOKUP_NUM_TOKENS = 10
CONTEXT_TOKENS = 4096
MISSING = "llama.cpp peers skipped: llama-cpp-python is not installed (pip install -e '.[llama]'; compiles ~20 min)"
# The verifier's dtype, or "int8" for its int8 weights -> llama.cpp's file type for the same
# width (llama.h's LLAMA_FTYPE_*; Q8_0: int8 values with a scale per 32, ~8.5 bits a weight).
GGUF_TYPES: dict[str, tuple[str, int]] = {"float32": ("F32", 0), "float16": ("F16", 1), "bfloat16": ("BF16", 32), "int8": ("Q8_0", 7)}


def retyped_gguf(source: Path, dtype: str) -> Path:
    """`source` re-typed by llama.cpp's quantizer to the width of `dtype`, made once and cached."""
    import llama_cpp

    name, ftype = GGUF_TYPES[dtype]
    folder = cache_root() / "llama-cpp"
    target = folder / f"{source.stem}.{name}.gguf"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    if llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp could not re-type {source} to {name}")
    partial.replace(target)
    return target


class LlamaCppSystem:
    """One llama.cpp model (plain, or with a prompt-lookup draft)."""

    def __init__(self, name: str, gguf: Path, tokenizer: Tokenizer, prompt_lookup: bool) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.name = name
        self._tokenizer = tokenizer
        draft = LlamaPromptLookupDecoding(num_pred_tokens=PROMPT_LOOKUP_NUM_TOKENS) if prompt_lookup else None
        # With a draft, llama-cpp-python keeps every position's logits but sizes their array by
        # `logits_all` as passed (one batch of rows): asked for here, or prompts that prefill more
        # than a batch fail with a broadcast error. Its prefill computes those logits either way.
        self._llm = Llama(
            model_path=str(gguf), n_ctx=CONTEXT_TOKENS, n_threads=os.cpu_count(), draft_model=draft,
            logits_all=prompt_lookup, verbose=False,
        )
        self._eos = {self._llm.token_eos(), *tokenizer.eos_token_ids}

    def generate(self, messages: list[dict[str, str]], decoding: Decoding) -> Output:
        ids = self._tokenizer.encode_chat(messages)
        if decoding.seed is not None:
            self._llm.set_seed(decoding.seed)
        new: list[int] = []
        first_token_at = None
        finish = "length"
        started = time.perf_counter()
        for token in self._llm.generate(
            ids, temp=decoding.temperature, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0, reset=True
        ):
            if first_token_at is None:
                first_token_at = time.perf_counter()
            if token in self._eos:
                finish = "eos"
                break
            new.append(int(token))
            if len(new) >= decoding.max_new_tokens:
                break
        wall = time.perf_counter() - started
        ttft = None if first_token_at is None else first_token_at - started
        return Output(new, self._tokenizer.decode(new), finish, wall, len(ids), time_to_first_token_seconds=ttft)


def llama_cpp_peers(tokenizer: Tokenizer, dtype: str = "float32") -> tuple[list[LlamaCppSystem], str | None]:
    """The llama.cpp peers on the default model at the width of `dtype`, or none and the reason."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return [], MISSING
    gguf = retyped_gguf(default_gguf(), dtype)
    return [
        LlamaCppSystem("llama-cpp", gguf, tokenizer, prompt_lookup=False),
        LlamaCppSystem("llama-cpp-prompt-lookup", gguf, tokenizer, prompt_lookup=True),
    ], None
