"""Where the verifier's onnxruntime step (onnx_passes.py) is made and kept: exported from the
served model (the drafters' Llama step with the final norm's rows as an output,
drafter_build/llama_graph.py, and the int8-bounded head's nodes, greedy_filter.py), optimized by
onnxruntime and written to a store in specdec's cache folder, keyed by the weights, the model's
config, the code it is made from and the versions and CPU that optimized it; a later start reads
it back in ~1 s instead of ~15 s."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from drafter_build.llama_graph import export_llama
from specdec.model_files import cache_root
from specdec.onnx_threads import session_options
from verifier_svc.backends.stored_steps import source_digest

log = logging.getLogger(__name__)

CANDIDATES = "greedy_candidates"  # the graph's output of the int8-bounded head's candidates
# The store keeps the optimized step of the STORE_KEEP models (or versions of the code) used last.
STEP_FILE = "step.onnx"
STORE_KEEP = 3
# The graph's code (the drafters' Llama step and its contract's names), outside this package.
GRAPH_SOURCE = Path(__file__).resolve().parents[2] / "drafter_build"
CONTRACT_SOURCE = Path(__file__).resolve().parents[2] / "drafter_svc" / "draft_cache.py"
# The contract's names and the greedy head's code, which the graph holds too.
FILTER_SOURCES = (CONTRACT_SOURCE, Path(__file__).with_name("greedy_filter.py"), Path(__file__).resolve().parents[1] / "greedy_head.py")


def graph_digest() -> str:
    """A digest of the code the step graph is made from: drafter_build, the contract's names
    (drafter_svc/draft_cache.py) and the greedy head's nodes and tables."""
    parts = [source_digest(GRAPH_SOURCE), *(hashlib.sha256(path.read_bytes()).hexdigest() for path in FILTER_SOURCES)]
    return hashlib.sha256("".join(parts).encode()).hexdigest()


def default_store() -> Path:
    """onnx-passes in specdec's cache folder (SPECDEC_CACHE_DIR, else ~/.cache/specdec)."""
    return cache_root() / "onnx-passes"


def stored_session(folder: Path, options):  # type: ignore[no-untyped-def]
    """A session over the optimized step kept in `folder`, or None where there is none or it no
    longer loads (the folder is then removed, with a warning)."""
    import onnxruntime as ort

    if not (folder / STEP_FILE).is_file():
        return None
    stored = session_options(options.intra_op_num_threads)
    stored.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # optimized when kept
    try:
        session = ort.InferenceSession(str(folder / STEP_FILE), stored, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own error types: a file cut short, another format
        log.warning("the kept onnxruntime step in %s does not load (%s): exported again", folder, str(error).splitlines()[0])
        shutil.rmtree(folder, ignore_errors=True)
        return None
    os.utime(folder)  # used last: the store keeps it longest
    return session


def exported_session(model: torch.nn.Module, options, folder: Path | None):  # type: ignore[no-untyped-def]
    """A session over the step exported now; its optimized graph written to `folder` (a complete
    folder appears at once, or not at all) and the store's oldest folders past STORE_KEEP removed."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="specdec-onnx-") as work, torch.no_grad():
        from verifier_svc.backends.greedy_filter import with_greedy_filter  # onnx: imported only where installed

        path = with_greedy_filter(export_llama(model, Path(work) / STEP_FILE, rows=True), model.lm_head.weight, "rows", CANDIDATES)
        if folder is not None:
            partial = Path(work) / "optimized"
            partial.mkdir()
            options.optimized_model_filepath = str(partial / STEP_FILE)
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{STEP_FILE}.data")
            # Its warning that an optimized graph may hold this CPU's own layouts: the store's key
            # names the CPU's instruction set.
            options.log_severity_level = 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        if folder is not None:
            folder.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # another process kept the same step first
                shutil.move(str(partial), str(folder))
            for old in sorted((p for p in folder.parent.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)[:-STORE_KEEP]:
                shutil.rmtree(old, ignore_errors=True)
    return session


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of the model's parameters (names and bytes): the exported step holds them."""
    digest = hashlib.blake2b(digest_size=16)
    for name, parameter in model.named_parameters():
        digest.update(name.encode())
        digest.update(parameter.detach().contiguous().view(torch.uint8).numpy())
    return digest.hexdigest()
