"""One sequence's keys and values for a model drafter, and a call of the drafter's graph over them
under either cache contract (drafter_build/onnx_contract.py).

A DraftCache holds, per layer, a key and a value array [1, H, capacity, D] whose first `length`
entries are the sequence's (entry j: position j); a rollback shortens `length`. Under the
`in_place` contract (the Llama graph) the arrays are buffers with spare room, bound to the
graph's cache inputs and, at the same addresses, its present outputs: a call writes its n
entries after the `length` held and copies nothing. Under `concatenated` (the generic graph) a
call reads the entries and returns them with the new ones appended, which become the arrays.

Torch-free (the drafter service runs without torch); the build's export check
(drafter_build/export_check.py) runs its graphs through `call` too, so a build is checked as the
drafter runs it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

CONCATENATED, IN_PLACE = "concatenated", "in_place"  # the contracts (drafter_build/onnx_contract.py)
# A buffer that must grow takes the entries needed plus half as many again (at least this many
# slots): a prompt's read has room for the drafting after it, and a growth's copy is paid once per
# half of the length, not once per call.
MIN_SPARE_SLOTS = 128


class DraftCache:
    """Per layer a key and a value array [1, H, capacity, D] (key.0, value.0, key.1, ...), the
    first `length` entries held."""

    def __init__(self, arrays: list[np.ndarray], length: int) -> None:
        self.arrays = arrays
        self.length = length
        self._binding: tuple[Any, Any] | None = None  # (session, IOBinding of the arrays as they are)

    @staticmethod
    def empty(num_layers: int, num_kv_heads: int, head_dim: int) -> DraftCache:
        return DraftCache([np.zeros((1, num_kv_heads, 0, head_dim), np.float32) for _ in range(2 * num_layers)], 0)

    @staticmethod
    def of_entries(
        keys: Sequence[bytes], values: Sequence[bytes], dtype: str, heads: int, head_dim: int, length: int, spare: int,
    ) -> DraftCache | None:
        """A cache holding `length` entries given per layer as bytes [heads, length, head_dim] of
        `dtype` ("float16" or "float32") in C order (keys[i], values[i]: layer i's;
        verifier.proto, PromptCache), with room for `spare` more; None where the bytes do not
        have that shape or type."""
        if dtype not in ("float16", "float32"):
            return None
        size = heads * length * head_dim * np.dtype(dtype).itemsize
        if len(keys) != len(values) or any(len(b) != size for b in (*keys, *values)):
            return None
        arrays = []
        for entries in (b for pair in zip(keys, values) for b in pair):
            array = np.zeros((1, heads, length + spare, head_dim), np.float32)
            array[0, :, :length] = np.frombuffer(entries, dtype).reshape(heads, length, head_dim)
            arrays.append(array)
        return DraftCache(arrays, length)

    @property
    def capacity(self) -> int:
        return self.arrays[0].shape[2]

    def entries(self) -> list[np.ndarray]:
        """The held entries, [1, H, length, D] views per layer."""
        return [a[:, :, : self.length] for a in self.arrays]

    def truncate(self, length: int) -> None:
        """Keep the first `length` entries (a rollback: the rest is overwritten by later calls)."""
        self.length = min(self.length, length)

    def copy(self, length: int | None = None, spare: int = 0) -> DraftCache:
        """A cache of its own memory holding the first `length` entries (all: None) with room for
        `spare` more."""
        length = self.length if length is None else min(length, self.length)
        arrays = []
        for a in self.arrays:
            own = np.zeros((*a.shape[:2], length + spare, a.shape[3]), np.float32)
            own[:, :, :length] = a[:, :, :length]
            arrays.append(own)
        return DraftCache(arrays, length)

    def reserve(self, end: int) -> None:
        """Room for `end` entries: the buffers grown (entries kept, spare room zeros) where smaller."""
        if self.capacity < end:
            grown = self.copy(spare=end - self.length + max(MIN_SPARE_SLOTS, end // 2))
            self.arrays, self._binding = grown.arrays, None

    def replace(self, arrays: list[np.ndarray]) -> None:
        """Hold `arrays` (a concatenated call's present outputs), all of their entries."""
        self.arrays, self.length, self._binding = arrays, arrays[0].shape[2], None

    def binding(self, session: Any, names: Sequence[str], presents: Sequence[str]) -> Any:
        """An IOBinding of `session` with the arrays bound as the inputs `names` and, at the same
        addresses, the outputs `presents`: the one made before while the arrays are the same."""
        if self._binding is not None and self._binding[0] is session:
            return self._binding[1]
        binding = session.io_binding()
        binding.bind_output("logits", "cpu")  # first: get_outputs lists the outputs in the order bound
        for name, present, array in zip(names, presents, self.arrays):
            binding.bind_input(name, "cpu", 0, np.float32, list(array.shape), array.ctypes.data)
            binding.bind_output(present, "cpu", 0, np.float32, list(array.shape), array.ctypes.data)
        self._binding = (session, binding)
        return binding


@functools.cache
def cache_names(num_layers: int, contract: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the graph's cache input names, its present output names) under `contract`."""
    prefix = "cache" if contract == IN_PLACE else "past"
    kinds = [(i, kind) for i in range(num_layers) for kind in ("key", "value")]
    return tuple(f"{prefix}_{kind}.{i}" for i, kind in kinds), tuple(f"present_{kind}.{i}" for i, kind in kinds)


def prompt_rows(length: int, positions: np.ndarray) -> int:
    """How many of a call's rows, at `positions` after `length` held entries, the fused attention
    node of the in-place contract (drafter_build/fused_attention.py) may take in one call: all of
    them after held entries; over none, onnxruntime's node takes the call for a prompt and rotates
    row i at position i whatever the positions say, so only the leading rows at 0, 1, 2, ... (a
    chain: the rows after them, a tree's, go in a call of their own)."""
    if length:
        return len(positions)
    off = np.flatnonzero(np.asarray(positions) != np.arange(len(positions)))
    return int(off[0]) if len(off) else len(positions)


def call(
    session: Any, contract: str, cache: DraftCache, token_ids: np.ndarray, positions: np.ndarray, bias: np.ndarray,
    logits_index: np.ndarray,
) -> np.ndarray:
    """One call of a drafter's graph (an onnxruntime InferenceSession under `contract`): the n
    tokens `token_ids` [n] at `positions` [n] after the cache's entries, `bias` [n, length + n];
    returns the logits [m, vocab] of the rows `logits_index` [m] and appends the n entries to the
    cache. Under the in-place contract, rows the node cannot take at once (prompt_rows) run as a
    second call."""
    split = prompt_rows(cache.length, positions) if contract == IN_PLACE else len(token_ids)
    if split < len(token_ids):
        return _split_call(session, contract, cache, token_ids, positions, bias, logits_index, split)
    feeds = {
        "input_ids": token_ids.astype(np.int64, copy=False)[None],
        "position_ids": positions.astype(np.int64, copy=False)[None],
        "attention_bias": bias.astype(np.float32, copy=False)[None, None],
        "logits_index": logits_index.astype(np.int64, copy=False),
    }
    names, presents = cache_names(len(cache.arrays) // 2, contract)
    end = cache.length + len(token_ids)
    if contract != IN_PLACE:
        logits, *grown = session.run(None, {**feeds, **dict(zip(names, cache.entries()))})
        cache.replace(grown)
        return logits[0]
    cache.reserve(end)
    binding = cache.binding(session, names, presents)
    for name, value in {**feeds, "seqlens_k": np.asarray([end - 1], np.int32), "total_length": np.asarray(end, np.int32)}.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("logits", "cpu")  # again: onnxruntime allocates them in this call's shape
    session.run_with_iobinding(binding)
    cache.length = end
    return binding.get_outputs()[0].numpy()[0]


def _split_call(
    session: Any, contract: str, cache: DraftCache, token_ids: np.ndarray, positions: np.ndarray, bias: np.ndarray,
    logits_index: np.ndarray, split: int,
) -> np.ndarray:
    """`call` as two calls, rows [0, split) then the rest, the logits put back in the order asked."""
    logits_index = np.asarray(logits_index)
    early = logits_index < split
    late = ~early
    first = call(session, contract, cache, token_ids[:split], positions[:split], bias[:split, :split], _rows_or_one(logits_index[early]))
    rest = call(session, contract, cache, token_ids[split:], positions[split:], bias[split:], _rows_or_one(logits_index[late] - split))
    logits = np.empty((len(logits_index), first.shape[-1]), np.float32)
    logits[early], logits[late] = first[: int(early.sum())], rest[: int(late.sum())]
    return logits


def _rows_or_one(rows: np.ndarray) -> np.ndarray:
    """`rows`, or row 0 where there are none (a call returns some row; the caller drops it)."""
    return rows if len(rows) else np.zeros(1, np.int64)
