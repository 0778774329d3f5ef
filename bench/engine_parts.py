"""Where one target pass's time goes (bench/engine.py's breakdown table).

A pass is run under torch.profiler and its tensor ops' own (self) times are summed by kind:
matrix products (the linear layers; the output head's share is timed apart on the pass's hidden
rows and taken out), attention kernels, and every other op (norms, rotary, elementwise, copies).
What the pass's unprofiled wall time has beyond the ops is Python and framework time between
kernels. A pass that onnxruntime runs (verifier_svc/backends/onnx_passes.py) is profiled by
onnxruntime's own profiler instead, on a second session of the same kept step: its kernels by
node (the linear layers' MatMul nodes, the head's, the fused attention nodes, the rest). The acceptance rule's share is timed on the pass's own logits: greedy (argmax walk) and
exact sampling at temperature 1 (standardize + multi-draft speculative sampling).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from specdec.sampling_params import SamplingParams
from verifier_svc.acceptance import verify_greedy, verify_speculative
from verifier_svc.sampling import standardize
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

# torch ops whose self time is a matrix product of the linear layers (F.linear lowers to addmm
# or mm; the weight-first layout calls mm itself, a one-row product from a one-row copy bmm,
# int8 weights _weight_int8pack_mm, packed copies mkldnn::_linear_pointwise).
LINEAR_OPS = (
    "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "aten::_mkldnn_linear", "aten::mkldnn_linear",
    "aten::_weight_int8pack_mm", "mkldnn::_linear_pointwise",
)
ATTENTION_MARKERS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")


def _timed(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of fn() over `repeats` calls after one warm-up."""
    times = []
    for i in range(repeats + 1):
        started = time.perf_counter()
        fn()
        if i:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def op_seconds_by_kind(prof: profile, passes: int) -> dict[str, float]:
    """Self CPU seconds per pass of the profiled ops: linear, attention, other."""
    kinds = {"linear": 0.0, "attention": 0.0, "other": 0.0}
    for event in prof.events():
        name = event.name
        if not (name.startswith("aten::") or "::" in name) or name.startswith("ProfilerStep"):
            continue  # user annotations and profiler bookkeeping
        seconds = event.self_cpu_time_total / 1e6
        if name in LINEAR_OPS:
            kinds["linear"] += seconds
        elif any(marker in name for marker in ATTENTION_MARKERS):
            kinds["attention"] += seconds
        else:
            kinds["other"] += seconds
    return {k: v / passes for k, v in kinds.items()}


def onnx_kernel_seconds(passes: Any, run: Callable[[], object], repeats: int) -> dict[str, float]:
    """Seconds per pass of onnxruntime's kernels by kind (linear: the MatMul nodes but the head's;
    head; attention: the GroupQueryAttention nodes; other) and of the whole profiled pass (wall),
    `run` (a pass through `passes`, an OnnxPasses) called `repeats` times after a warm-up, under
    onnxruntime's profiler."""
    with tempfile.TemporaryDirectory(prefix="specdec-engine-") as work, passes.profiling(Path(work) / "pass") as end:
        run()
        started = time.perf_counter()
        for _ in range(repeats):
            run()
        wall = (time.perf_counter() - started) / repeats
        events = json.loads(Path(end()).read_text())
    runs = [e for e in events if e.get("name") == "model_run"][1:]  # the first warms the session
    kinds = {"linear": 0.0, "head": 0.0, "attention": 0.0, "other": 0.0}
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time") or event["ts"] < runs[0]["ts"]:
            continue
        op = event.get("args", {}).get("op_name", "")
        kind = "head" if "lm_head" in event["name"] else "linear" if op in ("MatMul", "MatMulNBits") else "attention" if op == "GroupQueryAttention" else "other"
        kinds[kind] += event["dur"] / 1e6
    return {**{kind: seconds / len(runs) for kind, seconds in kinds.items()}, "wall": wall}


def pass_breakdown(target: TargetModel, context: int, new_tokens: int, repeats: int) -> dict[str, float]:
    """Milliseconds of one lone pass of `new_tokens` (a root + a chain) after `context` cached
    tokens, by part: wall, linear layers (without the head), output head, attention, other ops,
    Python between kernels, and the acceptance rule (greedy; sampled at temperature 1)."""
    cache = target.new_cache()
    target.score(cache, [1000 + i % 20000 for i in range(context)], chain([]))
    tree = chain([6000 + j for j in range(new_tokens - 1)])

    def run() -> torch.Tensor:
        cache.truncate(context)
        return target.score(cache, [5000], tree)

    wall = _timed(run, repeats)
    passes = getattr(target.backend, "onnx", None)
    if passes is not None and passes.folder is not None and target.backend.lone_pass(cache, context, new_tokens) is passes:
        profiled = onnx_kernel_seconds(passes, run, repeats)
        profiled_wall = profiled.pop("wall")
        scale = wall / profiled_wall  # as below: the profiled passes' parts, scaled to the unprofiled wall time
        return {
            "wall": 1000 * wall,
            "linear layers (without the head)": 1000 * scale * profiled["linear"],
            "output head": 1000 * scale * profiled["head"],
            "attention": 1000 * scale * profiled["attention"],
            "other tensor ops": 1000 * scale * profiled["other"],
            "Python/framework between kernels": 1000 * scale * max(0.0, profiled_wall - sum(profiled.values())),
            **acceptance_ms(run(), tree, repeats),
        }
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(repeats):
            run()
        profiled_wall = (time.perf_counter() - started) / repeats
    ops = op_seconds_by_kind(prof, repeats)

    hidden = torch.randn(new_tokens, target.model.config.hidden_size, dtype=target.dtype, device=target.device)
    head = target.model.get_output_embeddings()
    with torch.inference_mode(), target.kernels():
        head_seconds = _timed(lambda: head(hidden), repeats)

    # The profiled passes' parts, scaled to the unprofiled wall time (the profiler slows the
    # framework between ops, not the kernels, so this slightly overstates the Python share).
    scale = wall / profiled_wall
    in_ops = sum(ops.values())
    return {
        "wall": 1000 * wall,
        "linear layers (without the head)": 1000 * scale * max(0.0, ops["linear"] - head_seconds),
        "output head": 1000 * scale * min(head_seconds, ops["linear"]),
        "attention": 1000 * scale * ops["attention"],
        "other tensor ops": 1000 * scale * ops["other"],
        "Python/framework between kernels": 1000 * scale * max(0.0, profiled_wall - in_ops),
        **acceptance_ms(run(), tree, repeats),
    }


def acceptance_ms(logits: torch.Tensor, tree: Any, repeats: int) -> dict[str, float]:
    """Milliseconds of the acceptance rule on a pass's `logits` over `tree`: greedy, and exact
    sampling at temperature 1."""
    q_ids = torch.randint(0, logits.shape[-1], (len(tree), 1))
    q_probs = torch.ones(len(tree), 1)
    generator = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=1.0)
    greedy = _timed(lambda: verify_greedy(logits, tree), repeats)
    sampled = _timed(lambda: verify_speculative(standardize(logits, params), tree, q_ids, q_probs, generator), repeats)
    return {"acceptance, greedy": 1000 * greedy, "acceptance, sampled T=1": 1000 * sampled}
