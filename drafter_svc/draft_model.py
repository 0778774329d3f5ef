"""A built drafter model loaded into onnxruntime, one per process, shared by its sessions.

The model folder is what `specdec draft build` writes (drafter_build/): model.onnx with its KV
cache as inputs/outputs (contracts: drafter_build/onnx_contract.py) and manifest.json
(drafter_manifest.py, which names the build's cache contract). One loaded model (an onnxruntime
InferenceSession, CPU execution provider) is shared by every session of the process; each
session keeps its own KV cache (a DraftCache: draft_cache.py; onnx_drafter.py). The model also
keeps the process's running means of what its calls take, which a new session prices its first
draft with, and the prompts its sessions read, kept for later sessions that share them
(prompt_cache.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from drafter_svc.draft_cache import DraftCache, call
from drafter_svc.drafter_manifest import Manifest
from drafter_svc.prompt_cache import PromptCache
from specdec.onnx_threads import session_options

STEP_SECONDS_DECAY = 0.8  # weight of the previous estimate in the running means of seconds


class DraftModel:
    """A built drafter folder loaded into onnxruntime; `run` is one cached forward pass."""

    def __init__(self, folder: Path, threads: int = 0) -> None:
        import onnxruntime as ort

        self.folder = folder
        self.manifest = Manifest.read(folder)
        # Threads spin within a call and park between calls: the verifier may share these cores.
        self._session = ort.InferenceSession(str(folder / "model.onnx"), session_options(threads), providers=["CPUExecutionProvider"])
        # Running means over every session of the process (a new session prices its first draft
        # with them), 0 until timed: a drafting step's seconds (the model call, q and the draw),
        # and a token's seconds in a call that reads many (a prefill).
        self.step_seconds = 0.0
        self.token_seconds = 0.0
        self.prompts = PromptCache()

    def empty_cache(self) -> DraftCache:
        m = self.manifest
        return DraftCache.empty(m.num_layers, m.num_kv_heads, m.head_dim)

    def run(self, token_ids: Sequence[int], positions: Sequence[int], bias: np.ndarray, cache: DraftCache, last_only: bool = False) -> np.ndarray:
        """Logits [n, vocab] for each new token, or [1, vocab] for the last one with last_only;
        the n tokens' entries appended to `cache`. bias [n, past + n]. Only the logits asked for
        are computed: the output layer is a fifth of a 128-token read's work. ValueError for a
        position past the graph's (Manifest.max_positions: its fused node would read past its
        rotary tables)."""
        n = len(token_ids)
        if self.manifest.max_positions and max(positions, default=0) >= self.manifest.max_positions:
            raise ValueError(f"position {max(positions)} is past the drafter's {self.manifest.max_positions} positions")
        rows = np.arange(n - 1 if last_only else 0, n, dtype=np.int64)
        return call(self._session, self.manifest.cache, cache, np.asarray(token_ids), np.asarray(positions), bias, rows)

    def positions_left(self, read: int) -> int:
        """Positions the graph still takes after a read of `read` tokens (negative: the read itself
        is past them); unbounded where it takes any position."""
        most = self.manifest.max_positions
        return most - read if most else 1 << 30

    def time_step(self, seconds: float) -> None:
        """Fold one drafting step's seconds into the running mean `step_seconds`."""
        self.step_seconds = running_mean(self.step_seconds, seconds)

    def time_token(self, seconds: float) -> None:
        """Fold a many-token call's seconds per token into the running mean `token_seconds`."""
        self.token_seconds = running_mean(self.token_seconds, seconds)


_MODELS: dict[Path, DraftModel] = {}
_MODELS_LOCK = threading.Lock()


def load_draft_model(folder: Path, threads: int = 0) -> DraftModel:
    """The process's one DraftModel for `folder`, loaded on first use."""
    key = folder.resolve()
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = DraftModel(key, threads)
        return _MODELS[key]


def causal_bias(past: int, n: int) -> np.ndarray:
    """[n, past + n]: 0 where new token i may attend (the cache, itself and earlier new tokens)."""
    allowed = np.tri(n, past + n, k=past, dtype=bool)
    return np.where(allowed, 0.0, np.finfo(np.float32).min).astype(np.float32)


def running_mean(current: float, seconds: float) -> float:
    """The next value of a running mean of seconds (0: none yet, so the first value is taken)."""
    decay = STEP_SECONDS_DECAY if current else 0.0
    return decay * current + (1.0 - decay) * seconds
