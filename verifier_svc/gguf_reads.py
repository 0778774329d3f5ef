"""One read of a GGUF file while the verifier prepares a model from it.

transformers reads a GGUF file afresh for every question asked of it: the config (AutoConfig), the
model (its config again, then its tensors) and the tokenizer each open a new `gguf.GGUFReader`,
which parses every metadata field (a vocabulary's tens of thousands of strings and merges
included), and each call of `load_gguf_checkpoint` then turns all of those fields into Python
values; mapping the tensors' names builds gguf's name table once per module of the model (397
times for the default model). The verifier's first start on the default model's GGUF took 23.7 s
on the 2-core host, 8.2 s with this module (docs/design/gguf-read-once.md).

`read_once()`: while inside, every `GGUFReader` opened to read a file is the first one opened on
that file (nothing writes to it); `load_gguf_checkpoint`'s metadata-only answers
(return_tensors=False) for a file are deep copies of its first (callers pop keys from them); and
`gguf.get_tensor_name_map` answers from a table per (architecture, blocks). The tensors are still
read where they are asked for. All three are put back on the way out; nested uses share the
outermost's reads. transformers imports these names inside the functions that use them, so
replacing the module attributes reaches every caller; should it stop doing so, the answers stay
the same, only the time comes back.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_depth = 0
_put_back: list[Any] = []  # the originals while inside: GGUFReader, load_gguf_checkpoint, get_tensor_name_map


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """Inside, a GGUF file is parsed once (module docstring). Usable as a decorator."""
    global _depth
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    with _lock:
        _depth += 1
        if _depth == 1:
            _put_back[:] = [gguf.GGUFReader, gguf_utils.load_gguf_checkpoint, gguf.get_tensor_name_map]
            gguf.GGUFReader, gguf_utils.load_gguf_checkpoint, gguf.get_tensor_name_map = _shared(*_put_back)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gguf.GGUFReader, gguf_utils.load_gguf_checkpoint, gguf.get_tensor_name_map = _put_back


def _shared(reader_class: Any, load_checkpoint: Any, tensor_name_map: Any) -> tuple[Any, Any, Any]:
    """Stand-ins for the three that answer each file (or name table) from its first answer."""
    readers: dict[str, Any] = {}
    metadata: dict[str, dict[str, Any]] = {}

    def shared_reader(path: Any, mode: str = "r") -> Any:
        if mode != "r":  # one that may write is its own
            return reader_class(path, mode)
        key = os.path.realpath(path)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    def load_metadata_once(path: Any, return_tensors: bool = False, model_to_load: Any = None, torch_dtype: Any = None) -> dict[str, Any]:
        if return_tensors:
            return load_checkpoint(path, return_tensors=True, model_to_load=model_to_load, torch_dtype=torch_dtype)
        key = os.path.realpath(path)
        if key not in metadata:
            metadata[key] = load_checkpoint(path, return_tensors=False)
        return copy.deepcopy(metadata[key])

    return shared_reader, load_metadata_once, functools.cache(tensor_name_map)
