"""`specdec draft build {quantized,small}`: build a target's ONNX drafter once, offline, into the
drafter cache (specdec.model_files.drafter_dir), with a manifest.

- quantized: the target itself exported with its KV cache (onnx_export.py), weights int8
  (MatMulNBits, int8 products): the "quantized copy of the target" drafter.
- small: a few-layer model distilled from the target, sharing its tokenizer
  (drafter_build.distill.build_small_model), exported in float32 (int8 with --int8).

The manifest (manifest.json beside model.onnx) records the kind, the target it was built from
(source, tokenizer fingerprint, vocabulary size, EOS ids), the model's cache shape, how it was
built (versions, opset, quantization, seed), the float32 export's largest logit difference
from torch, and the build time. The drafter service reads the shape and the fingerprint.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from specdec.model_files import drafter_dir, tokenizer_dir

KINDS = ("quantized", "small")
log = logging.getLogger(__name__)
# Logit check of every float32 export: a short prompt run as two cached calls against torch.
_CHECK_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 30, 2, 198, 1, 4093, 198, 12592, 17, 1116]
_CHECK_SPLIT = 11


def build(kind: str, source: str = "default", out: Path | None = None, force: bool = False, seed: int = 0, int8: bool | None = None) -> Path:
    """The folder holding `kind`'s model.onnx + manifest.json for the target `source`, built
    unless it exists (or `force`). int8 defaults to True for quantized, False for small."""
    import torch

    from drafter_build import onnx_export
    from specdec.tokenizer import Tokenizer
    from verifier_svc.model_loader import load_model, model_dir

    if kind not in KINDS:
        raise ValueError(f"unknown drafter kind {kind!r}; expected one of {', '.join(KINDS)}")
    out = out or drafter_dir(source, kind)
    built = graph_version(out)
    if built == onnx_export.GRAPH_VERSION and not force:
        log.info("%s drafter already built in %s (--force rebuilds)", kind, out)
        return out
    if built is not None and built != onnx_export.GRAPH_VERSION:
        log.info("%s drafter in %s has graph version %d, not %d: rebuilding", kind, out, built, onnx_export.GRAPH_VERSION)
        force = True
    quantize = kind == "quantized" if int8 is None else int8
    started = time.perf_counter()
    target_dir = model_dir(source)
    tokenizer = Tokenizer(tokenizer_dir(source))
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model_folder = target_dir
        if kind == "small":
            from drafter_build.distill import build_small_model  # the lead's distillation script

            model_folder = build_small_model(target_dir, work / "small-torch", seed=seed)
        torch.manual_seed(seed)
        model = load_model(model_folder, "cpu", torch.float32)
        target = {
            "source": source,
            "model_dir": str(target_dir),
            "tokenizer_fingerprint": tokenizer.fingerprint,
            "vocab_size": model.config.vocab_size,
            "eos_token_ids": tokenizer.eos_token_ids,
        }
        write_drafter(model, work, kind=kind, quantize=quantize, target=target, seed=seed, started=started)
        if kind == "small":  # keep the torch weights: the benchmark and the tests reload them
            shutil.move(str(model_folder), work / "torch")
        if force and out.exists():
            shutil.rmtree(out)
        work.chmod(0o755)  # mkdtemp's 0700 would hide the build from a drafter running as another user
        try:
            work.rename(out)
        except OSError:  # another process finished the same build first: keep its copy
            if not (out / "manifest.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("%s drafter built in %.0f s: %s", kind, time.perf_counter() - started, out)
    return out


def graph_version(folder: Path) -> int | None:
    """The graph version (onnx_export.GRAPH_VERSION) of the drafter built in `folder`: 1 for a
    build from before versions were recorded, 0 where its manifest cannot be read (so that it
    is rebuilt), None where nothing is built."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        return int(json.loads(manifest.read_text()).get("created_with", {}).get("graph_version", 1))
    except (ValueError, TypeError, AttributeError):  # not JSON, not an object, not a number
        return 0


def write_drafter(model, work: Path, *, kind: str, quantize: bool, target: dict, seed: int, started: float | None = None) -> Path:  # type: ignore[no-untyped-def]
    """Export `model` (a LlamaForCausalLM) into work/model.onnx (int8 if `quantize`) with its
    manifest.json; `target` describes the target it drafts for. Returns `work`."""
    import onnxruntime
    import torch
    import transformers

    from drafter_build import onnx_export

    started = time.perf_counter() if started is None else started
    float_path = onnx_export.export(model, work / "float")
    check_ids = [t % model.config.vocab_size for t in _CHECK_IDS]
    diff = onnx_export.max_abs_logit_diff(model, float_path, check_ids, _CHECK_SPLIT)
    log.info("float32 export: largest logit difference from torch %.2e", diff)
    if quantize:
        onnx_export.quantize_int8(float_path, work / onnx_export.MODEL_FILE)
    else:
        for item in (work / "float").iterdir():
            shutil.move(str(item), work / item.name)
    shutil.rmtree(work / "float", ignore_errors=True)
    onnx_export.write_manifest(work, {
        "kind": kind,
        "target": target,
        "model": onnx_export.model_shape(model),
        "created_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
            "opset": onnx_export.OPSET,
            "graph_version": onnx_export.GRAPH_VERSION,
            "quantization": "int8 weights (MatMulNBits, symmetric, blocks of 32), int8 products (activations per row and block)" if quantize else "none (float32)",
            "seed": seed,
        },
        "float32_max_abs_logit_diff": diff,
        "build_seconds": round(time.perf_counter() - started, 1),
    })
    return work


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="specdec draft build", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=KINDS, nargs="?", default="quantized", help="what to build (default: quantized, the faster drafter measured: docs/design/int8-drafter.md)")
    p.add_argument("--model", default="default", help="the target: 'default', a .gguf file or a model folder")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: the drafter cache, where the drafter service looks)")
    p.add_argument("--force", action="store_true", help="rebuild even if the folder holds a build")
    p.add_argument("--seed", type=int, default=0, help="seed of the distillation (small)")
    p.add_argument("--int8", action=argparse.BooleanOptionalAction, default=None,
                   help="int8 weights (default: on for quantized, off for small)")
    args = p.parse_args(list(argv))
    # onnxruntime's quantizer logs every tensor at INFO on the root logger: keep the root at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    print(build(args.kind, args.model, args.out, args.force, args.seed, args.int8))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
