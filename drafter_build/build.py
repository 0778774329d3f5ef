"""`specdec draft build {quantized,small}`: build a target's ONNX drafter once, offline, into the
drafter cache (specdec.model_files.drafter_dir), with a manifest, and check it against torch.

- quantized: the target itself exported with its KV cache (onnx_export.py), weights int8
  (MatMulNBits, int8 products): the "quantized copy of the target" drafter.
- small: a separate small model sharing the target's tokenizer, exported in float32 (int8 with
  --int8): the transformers folder given with --from (any decoder-only architecture), else a
  few-layer model distilled from the target (drafter_build.distill.build_small_model).

Every build is run against the torch model on a fixed sequence of ids (export_check.py) and
FAILS (exit 1, one line with the measured difference and the tolerance) beyond the tolerance;
the failed build is kept in the output folder for inspection and the drafter service refuses it.

The manifest (manifest.json beside model.onnx) records the kind, the target it was built for
(source, tokenizer fingerprint, vocabulary size, EOS ids), the drafter model it was exported
from, the cache shape, how it was built (versions, graph, opset, quantization, seed), the check
(measured difference, argmax agreement, tolerance, passed) and the build time. The drafter
service reads the shape, the fingerprint and the check.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from drafter_build.export_check import ExportCheckFailed
from specdec.model_files import drafter_dir, tokenizer_dir

KINDS = ("quantized", "small")
DISTILLED = "distilled from the target"
log = logging.getLogger(__name__)


class BuildError(RuntimeError):
    """A drafter that cannot be built from what was given (the message says why, in one line)."""


def build(
    kind: str, source: str = "default", out: Path | None = None, force: bool = False, seed: int = 0,
    int8: bool | None = None, drafter_model: Path | None = None, graph: str = "auto",
) -> Path:
    """The folder holding `kind`'s model.onnx + manifest.json for the target `source`, built
    unless a build that passed its check is there (or `force`). int8 defaults to True for
    quantized, False for small. `drafter_model`: the small model's transformers folder (small
    only; None: distil one). ExportCheckFailed (the build kept in the folder) when the ONNX
    model is not the torch model; BuildError when it cannot be built."""
    import torch

    from drafter_build import export_check
    from specdec.tokenizer import Tokenizer
    from verifier_svc.model_loader import model_dir

    if kind not in KINDS:
        raise BuildError(f"unknown drafter kind {kind!r}; expected one of {', '.join(KINDS)}")
    if drafter_model is not None and kind != "small":
        raise BuildError("--from names the small drafter's model: use it with `specdec draft build small`")
    out = out or drafter_dir(source, kind)
    wanted = str(drafter_model.resolve()) if drafter_model is not None else DISTILLED if kind == "small" else ""
    reason = rebuild_reason(out, wanted, graph)
    if reason is None and not force:
        log.info("%s drafter already built in %s (--force rebuilds)", kind, out)
        return out
    if reason is not None and (out / "manifest.json").is_file():
        log.info("%s drafter in %s: %s: rebuilding", kind, out, reason)
    quantize = kind == "quantized" if int8 is None else int8
    started = time.perf_counter()
    target_dir = model_dir(source)
    tokenizer = Tokenizer(tokenizer_dir(source))
    if drafter_model is not None:
        _check_same_tokenizer(drafter_model, tokenizer.fingerprint, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model_folder = drafter_model or target_dir
        if kind == "small" and drafter_model is None:
            from drafter_build.distill import build_small_model  # the lead's distillation script

            model_folder = build_small_model(target_dir, work / "small-torch", seed=seed)
        torch.manual_seed(seed)
        model = load_for_export(model_folder)
        target = {
            "source": source,
            "model_dir": str(target_dir),
            "tokenizer_fingerprint": tokenizer.fingerprint,
            "vocab_size": model.config.get_text_config(decoder=True).vocab_size,
            "eos_token_ids": tokenizer.eos_token_ids,
        }
        ids = export_check.check_ids(target["vocab_size"], tokenizer)
        failure: ExportCheckFailed | None = None
        try:
            write_drafter(model, work, kind=kind, quantize=quantize, target=target, seed=seed, started=started,
                          check_ids=ids, graph=graph, drafter_source=wanted)
        except ExportCheckFailed as error:
            failure = error
        if kind == "small" and drafter_model is None:  # keep the torch weights: the benchmark and the tests reload them
            shutil.move(str(model_folder), work / "torch")
        if out.exists():
            shutil.rmtree(out)
        work.chmod(0o755)  # mkdtemp's 0700 would hide the build from a drafter running as another user
        try:
            work.rename(out)
        except OSError:  # another process finished the same build first: keep its copy
            if not (out / "manifest.json").is_file():
                raise
        if failure is not None:
            raise ExportCheckFailed(f"{failure} (the build is kept in {out}; the drafter service refuses it)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("%s drafter built and checked in %.0f s: %s", kind, time.perf_counter() - started, out)
    return out


def load_for_export(folder: Path):  # type: ignore[no-untyped-def]
    """The causal LM in `folder`, float32, with the implementations the generic graph traces:
    eager attention (every architecture has it) and, for mixture-of-experts layers, every
    expert run on every token with the router's weights (`batched_mm`; transformers' default
    picks the experts a token routes to with data-dependent shapes, which torch.export cannot
    trace). BuildError where transformers cannot load one."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, attn_implementation="eager", experts_implementation="batched_mm"
        ).eval()
    except (OSError, ValueError, KeyError) as error:
        raise BuildError(f"cannot load a causal LM from {folder}: {_first_line(error)}") from error


def _check_same_tokenizer(folder: Path, target_fingerprint: str, source: str) -> None:
    from specdec.tokenizer import Tokenizer

    if not (folder / "tokenizer.json").is_file():
        raise BuildError(f"the drafter model {folder} has no tokenizer.json: its tokenizer must be the target's to draft for it")
    fingerprint = Tokenizer(folder).fingerprint
    if fingerprint != target_fingerprint:
        raise BuildError(
            f"the drafter model {folder} has another tokenizer (fingerprint {fingerprint[:12]}) than the target "
            f"{source} (fingerprint {target_fingerprint[:12]}): a drafter must share the target's tokenizer"
        )


def rebuild_reason(folder: Path, drafter_source: str = "", graph: str = "auto") -> str | None:
    """Why the drafter in `folder` must be built (again), None where it can be kept: a build that
    passed its check, of the current version of its graph (`graph` where not auto), from
    `drafter_source` (the small model's folder or DISTILLED; "" for the target itself)."""
    from drafter_build.onnx_export import GRAPH_VERSIONS

    path = folder / "manifest.json"
    if not path.is_file():
        return "not built"
    try:
        manifest = json.loads(path.read_text())
        created = manifest.get("created_with", {})
        built_graph, version = created.get("graph", "llama"), int(created.get("graph_version", 1))
        passed = manifest.get("check", {}).get("passed")
        source = manifest.get("drafter", {}).get("model_dir", DISTILLED if manifest.get("kind") == "small" else "")
    except (ValueError, TypeError, AttributeError):  # not JSON, not an object, not a number
        return "its manifest cannot be read"
    if passed is None:
        return "built before the export check"
    if not passed:
        return "its export check failed"
    if version != GRAPH_VERSIONS.get(built_graph):
        return f"{built_graph} graph version {version}, not {GRAPH_VERSIONS.get(built_graph)}"
    if graph != "auto" and graph != built_graph:
        return f"built with the {built_graph} graph, not {graph}"
    if source != drafter_source:
        return f"built from {source or 'the target'}, not {drafter_source or 'the target'}"
    return None


def write_drafter(  # type: ignore[no-untyped-def]
    model, work: Path, *, kind: str, quantize: bool, target: dict, seed: int, check_ids: list[int],
    started: float | None = None, graph: str = "auto", drafter_source: str = "",
) -> Path:
    """Export `model` (a transformers causal LM, eval mode) into work/model.onnx (int8 if
    `quantize`), check it against torch on `check_ids` and write its manifest.json (`target`
    describes the target it drafts for). Returns `work`; ExportCheckFailed (after writing the
    manifest) when the check fails, BuildError when the model cannot be exported."""
    import onnxruntime
    import torch
    import transformers

    from drafter_build import export_check, onnx_export
    from drafter_build.generic_export import UnsupportedModel
    from drafter_build.onnx_contract import DYNAMO_OPSET, IN_PLACE, MODEL_FILE, OPSET

    started = time.perf_counter() if started is None else started
    name = type(model).__name__
    try:
        chosen = onnx_export.choose_graph(model, graph)
        shape = {**onnx_export.model_shape(model), "cache": onnx_export.CACHE_CONTRACTS[chosen]}
        if shape["cache"] == IN_PLACE:  # its fused node rotates from tables of this many positions
            shape["max_positions"] = model.config.max_position_embeddings
        float_path = onnx_export.export(model, work / "float", chosen)
    except (UnsupportedModel, ValueError) as error:
        raise BuildError(f"cannot export {name}: {_first_line(error)}") from error
    except Exception as error:  # the exporter's own failures (torch.export, onnxscript): one line, not a traceback
        log.debug("export of %s failed", name, exc_info=True)
        raise BuildError(f"cannot export {name} to ONNX ({chosen} graph): {type(error).__name__}: {_first_line(error)}") from error
    reference = export_check.reference_logits(model, check_ids)
    layout = (shape["num_layers"], shape["num_kv_heads"], shape["head_dim"], shape["cache"])
    checks = [export_check.compare(reference, export_check.onnx_logits(float_path, check_ids, *layout), "float32")]
    log.info("%s", checks[0].describe())
    if quantize and checks[0].passed:
        onnx_export.quantize_int8(float_path, work / MODEL_FILE)
        checks.append(export_check.compare(reference, export_check.onnx_logits(work / MODEL_FILE, check_ids, *layout), "int8"))
        log.info("%s", checks[-1].describe())
    if not quantize:
        for item in (work / "float").iterdir():
            shutil.move(str(item), work / item.name)
    shutil.rmtree(work / "float", ignore_errors=True)
    passed = all(check.passed for check in checks)
    onnx_export.write_manifest(work, {
        "kind": kind,
        "target": target,
        "drafter": {"architecture": name, "model_dir": drafter_source},
        "model": shape,
        "created_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
            "graph": chosen,
            "graph_version": onnx_export.GRAPH_VERSIONS[chosen],
            "opset": OPSET if chosen == "llama" else DYNAMO_OPSET,
            "quantization": "int8 weights (MatMulNBits, symmetric, blocks of 32), int8 products (activations per row and block)" if quantize else "none (float32)",
            "seed": seed,
        },
        "check": {"ids": len(check_ids), **{check.precision: check.record() for check in checks}, "passed": passed},
        "build_seconds": round(time.perf_counter() - started, 1),
    })
    if not passed:
        failed = next(check for check in checks if not check.passed)
        raise ExportCheckFailed(f"{name}: the ONNX drafter is not the torch model: {failed.describe()}")
    return work


def _first_line(error: BaseException) -> str:
    """The error's first line without terminal colour codes (torch's exporter colours its messages)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def main(argv: Sequence[str]) -> int:
    from drafter_build.onnx_export import GRAPHS

    p = argparse.ArgumentParser(prog="specdec draft build", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=KINDS, nargs="?", default="quantized", help="what to build (default: quantized, the faster drafter measured: docs/design/int8-drafter.md)")
    p.add_argument("--model", default="default", help="the target: 'default', a .gguf file or a model folder")
    p.add_argument("--from", dest="drafter_model", type=Path, default=None, metavar="FOLDER",
                   help="small: the drafter's transformers model folder (any decoder-only architecture, the target's tokenizer); default: distil one")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: the drafter cache, where the drafter service looks)")
    p.add_argument("--force", action="store_true", help="rebuild even if the folder holds a build that passed its check")
    p.add_argument("--seed", type=int, default=0, help="seed of the distillation (small)")
    p.add_argument("--int8", action=argparse.BooleanOptionalAction, default=None,
                   help="int8 weights (default: on for quantized, off for small)")
    p.add_argument("--graph", choices=GRAPHS, default="auto",
                   help="ONNX graph: generic (any architecture), llama (the hand-written Llama graph) or auto (llama for LlamaForCausalLM)")
    args = p.parse_args(list(argv))
    # onnxruntime's quantizer logs every tensor at INFO on the root logger: keep the root at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    try:
        folder = build(args.kind, args.model, args.out, args.force, args.seed, args.int8, args.drafter_model, args.graph)
    except (ExportCheckFailed, BuildError, FileNotFoundError) as error:
        print(f"specdec draft build: {_first_line(error)}", file=sys.stderr)
        return 1
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
