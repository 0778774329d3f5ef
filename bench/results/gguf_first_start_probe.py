"""The verifier's first start on the default model's GGUF, from an empty cache: open_model (its
config checked, the folder dequantized and written, the tokenizer converted, the model loaded).
Run from a checkout: `python bench/results/gguf_first_start_probe.py`, alternating checkouts."""

import os
import tempfile
import time

os.environ["SPECDEC_CACHE_DIR"] = tempfile.mkdtemp()

import torch  # noqa: E402

from verifier_svc.model_loader import open_model  # noqa: E402

started = time.perf_counter()
open_model("default", "cpu", torch.float32)
print(f"first open_model {time.perf_counter() - started:.1f} s")
