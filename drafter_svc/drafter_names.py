"""The drafters a request may name, and which of them run a built model."""

from __future__ import annotations

# Model drafters (onnx_drafter.py) by name -> the `specdec draft build` kind they run. `hybrid`
# runs onnx-quantized's model and, beside it, the free copy drafter (hybrid_drafter.py): each
# round the session's policy sends whichever draft it expects more from.
HYBRID = "hybrid"
MODEL_DRAFTERS: dict[str, str] = {"onnx-quantized": "quantized", "onnx-small": "small", HYBRID: "quantized"}
DRAFTER_NAMES: tuple[str, ...] = ("copy", "ngram", *MODEL_DRAFTERS)
