"""bench/engine.py's accounting: ops are sorted into the right kinds, and the report shows every
measured part (the timings themselves are the benchmark's, never asserted here)."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from bench.engine import report, weight_bytes
from bench.engine_parts import op_seconds_by_kind
from verifier_svc.int8_weights import quantize_linear_layers


def test_profiled_ops_are_sorted_by_kind() -> None:
    x, w = torch.randn(8, 256), torch.randn(512, 256)
    q = k = v = torch.randn(1, 4, 64, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            F.linear(x, w)
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.relu(x)
    kinds = op_seconds_by_kind(prof, passes=3)
    assert kinds["linear"] > 0 and kinds["attention"] > 0 and kinds["other"] > 0


def test_weight_bytes_counts_a_tied_weight_once() -> None:
    embedding = torch.nn.Embedding(100, 16)
    head = torch.nn.Linear(16, 100, bias=False)
    head.weight = embedding.weight
    model = torch.nn.ModuleDict({"embedding": embedding, "head": head})
    assert weight_bytes(model) == 100 * 16 * 4


def test_weight_bytes_of_int8_weights_are_their_values_and_scales() -> None:
    """The head's int8 values and bfloat16 scales; not the embedding, of which a pass reads one row."""
    embedding = torch.nn.Embedding(100, 16)
    head = torch.nn.Linear(16, 100, bias=False)
    head.weight = embedding.weight
    model = torch.nn.ModuleDict({"embedding": embedding, "head": head})
    quantize_linear_layers(model)
    assert weight_bytes(model) == 100 * 16 + 100 * 2


def test_report_shows_floor_curve_and_breakdown() -> None:
    args = argparse.Namespace(model="default", device="cpu", dtype="float32", context=256, repeats=5, no_graphs=False, cuda_compiled="layers", cpu_compiled=False, no_onnx_passes=False,
                              no_one_row_copies=False, no_float32_copies=False, no_onednn_copies=False, quantization="none")
    results = {
        "machine": {"cpu_model": "test cpu", "usable_cpus": 2, "torch": "2.13.0", "git_commit": "abc"},
        "floor": {"weight_mb": 538.0, "read_gbs": 48.0, "ms": 11.2},
        "in_process_ms": 22.4,
        "services_ms": 28.0,
        "grpc_round_trip_ms": 1.5,
        "price": {"plain_ms": 3.3, "node_cost": 0.012, "round_overhead": 0.25},
        "curve": {1: [0.020, 0.021, 0.030], 4: [0.030, 0.040, 0.060]},
        "breakdown": {1: {"wall": 22.0, "output head": 2.0}, 8: {"wall": 30.0, "output head": 3.0}},
    }
    text = report(args, results)
    assert "| memory floor (538 MB of weights at 48.0 GB/s) | 11.20 | 89.3 | 1.00 |" in text
    assert "| plain decoding, in-process | 22.40 | 44.6 | 2.00 |" in text
    assert "| 4 | 30.0 | 1.33 | 2.00 |" in text  # t(n)/t(1) for B = 4
    assert "| output head | 2.00 | 3.00 |" in text
    assert "gRPC round trip per round" in text
    assert "(ModelInfo.price): a plain pass 3.30 ms; a drafted node 0.012 and a drafted round 0.250 more" in text
    assert "ModelInfo.engine" not in text
    assert "\n\nThe services' verifier ran its passes as (ModelInfo.engine): cpu: torch.\n" in report(args, {**results, "services_engine": "cpu: torch"}) + "\n"
    assert text.startswith("# Engine profile: default on cpu, float32\n")
    assert "one-row copies kept" not in text
    assert "; one-row copies kept by the start-up timing\n" in report(args, {**results, "one_row": True})
    assert "; float32 copies kept by the start-up timing\n" in report(args, {**results, "float32_rows": True})
    assert "; oneDNN copies read from 4 rows by the start-up timing\n" in report(args, {**results, "onednn_min_rows": 4})
    args.cpu_compiled = True
    assert report(args, results).startswith("# Engine profile: default on cpu, float32, compiled lone passes\n")
    args.no_one_row_copies = True
    assert report(args, results).startswith("# Engine profile: default on cpu, float32, compiled lone passes, no one-row copies\n")
    args.cpu_compiled, args.no_one_row_copies, args.no_onnx_passes = False, False, False
    assert "their parts by onnxruntime's profiler" in report(args, {**results, "onnx_passes": True})
    # Asked for, but off (for the model, or by the verifier's start check): the table says so.
    assert "(every pass in torch: onnxruntime's passes are off, for this model or by the verifier's start check)" in report(args, results)
    args.no_onnx_passes = True
    assert report(args, results).startswith("# Engine profile: default on cpu, float32, no onnxruntime passes\n")
    assert "their time counts" not in report(args, results)
    args.dtype, args.no_onnx_passes, args.no_float32_copies = "bfloat16", False, True
    assert report(args, results).startswith("# Engine profile: default on cpu, bfloat16, no float32 copies\n")
    assert "their time counts" not in report(args, results)
    args.dtype, args.no_float32_copies, args.no_onednn_copies = "float32", False, True
    assert report(args, results).startswith("# Engine profile: default on cpu, float32, no oneDNN copies\n")
    args.device, args.no_graphs = "cuda", True
    assert report(args, results).startswith("# Engine profile: default on cuda, float32, CUDA graphs off\n")
    args.no_graphs, args.cuda_compiled = False, "blocks"
    assert report(args, results).startswith("# Engine profile: default on cuda, float32, graphs with blocks compiled\n")
