"""The verifier engine's profile on this machine: where a target pass's time goes, against the
memory floor. Decisions about the engine (kernels, layouts, compilation, batching) are made from
its output; docs/benchmarks.md holds the committed runs.

It prints, for the served model and device:

1. the memory floor: the weights' bytes over a measured read bandwidth (a token must read every
   weight once), as ms/token and tok/s;
2. greedy plain decoding (no drafts) in-process (TargetModel.score, one token a pass) and through
   the real services on loopback (`specdec.Client`, num_draft_tokens=0, temperature 0), ms/token
   after the first;
3. the verify-pass cost curve t(n)/t(1) for n = 1..N new tokens (a root and n-1 drafted nodes in
   a chain) for a lone session and for batches of B sessions (`score_batch`);
4. a breakdown of a one-token and an n-token pass: linear layers, attention, output head, other
   tensor ops, and the Python/framework time between kernels (wall time less the time inside
   tensor ops, from torch.profiler), the acceptance rule on the pass's logits, and the gRPC round
   trip per round seen by the drafter (its round trip less the verifier's pass).

    flock /tmp/specdec-cpu.lock python -m bench.engine
    python -m bench.engine --device cuda --batches 1 4 16 --max-new 16

Times are the median of --repeats after a warm-up; every shape of one table is measured in the
same run. Compare numbers only within one run of this command (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import specdec.cli  # noqa: F401 - before torch: the thread settings the served processes run with
import torch

from bench.engine_parts import pass_breakdown
from bench.machine import describe, verifier_info
from verifier_svc.backends.cuda import COMPILED
from verifier_svc.int8_weights import QUANTIZATIONS, Int8Linear
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.kv_cache import KVCache
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

DTYPES = ("auto", "float32", "bfloat16", "float16")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="model source (as the verifier's --model)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--quantization", choices=QUANTIZATIONS, default="none", help="the verifier's --quantization (int8: weight-only int8 linear layers, bfloat16 activations)")
    p.add_argument("--context", type=int, default=256, help="cached tokens per session before the timed passes")
    p.add_argument("--max-new", type=int, default=16, help="the curve's largest n (new tokens a pass)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16], help="sessions per pass in the curve")
    p.add_argument("--decode-tokens", type=int, default=64, help="tokens of plain decoding timed")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-services", action="store_true", help="skip plain decoding through the services")
    p.add_argument("--no-graphs", action="store_true", help="on CUDA, run every pass eagerly (the verifier's --cuda-graphs false)")
    p.add_argument("--cuda-compiled", choices=list(COMPILED), default="layers", help="on CUDA, what is compiled inside the recorded graphs (the verifier's --cuda-compiled)")
    p.add_argument("--cpu-compiled", action="store_true", help="on CPU, lone passes as static passes with compiled layers (the verifier's --cpu-compiled-passes true)")
    p.add_argument("--no-onnx-passes", action="store_true", help="on CPU, every pass in torch (the verifier's --cpu-onnx-passes false)")
    p.add_argument("--no-one-row-copies", action="store_true", help="on CPU, no one-row copies of the linear weights (the verifier's --cpu-one-row-copies false)")
    p.add_argument("--no-float32-copies", action="store_true", help="on CPU in bfloat16, no float32 copies of the linear weights (the verifier's --cpu-float32-copies false)")
    p.add_argument("--no-onednn-copies", action="store_true", help="on CPU in float32 or bfloat16, no oneDNN copies of the linear weights (the verifier's --cpu-onednn-copies false)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p.parse_args(argv)


def median_seconds(run: Callable[[], object], repeats: int, reset: Callable[[], object] = lambda: None) -> float:
    """Median wall time of `run` over `repeats` calls after one warm-up, `reset` between calls
    (untimed); on CUDA each call is synchronized."""
    times = []
    for i in range(repeats + 1):
        reset()
        sync()
        started = time.perf_counter()
        run()
        sync()
        if i:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def read_bandwidth(device: str, mib: int = 512, repeats: int = 7) -> float:
    """Bytes per second a full read of a `mib` MiB tensor reaches (the fastest of `repeats` sums)."""
    data = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
    best = float("inf")
    for _ in range(repeats):
        sync()
        started = time.perf_counter()
        data.sum()
        sync()
        best = min(best, time.perf_counter() - started)
    return data.numel() * 4 / best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a one-token pass reads: the model's parameters, a tied embedding counted once as the
    output head (parameters() dedups); with int8 weights their values and scales (buffers) and not
    the embedding, of which a pass reads one row a token."""
    tensors = {id(p): p for p in model.parameters()}
    if any(isinstance(m, Int8Linear) for m in model.modules()):
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding):
                tensors.pop(id(m.weight), None)
        tensors.update({id(b): b for b in model.buffers()})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def prefilled(target: TargetModel, sessions: int, context: int) -> list[KVCache]:
    caches = [target.new_cache() for _ in range(sessions)]
    for s, cache in enumerate(caches):
        target.score(cache, [1000 + (7 * s + i) % 20000 for i in range(context)], chain([]))
    return caches


def plain_decode_in_process(target: TargetModel, context: int, tokens: int) -> float:
    """Seconds per token of greedy one-token passes after `context` cached tokens (each reading
    only its argmax, as a greedy session's do)."""
    cache = prefilled(target, 1, context)[0]
    token = 5000
    started = None
    for i in range(tokens + 1):
        if i == 1:  # the first pass is a warm-up
            sync()
            started = time.perf_counter()
        token = int(target.score(cache, [token], chain([]), argmax_only=True)[0].argmax())
    sync()
    assert started is not None
    return (time.perf_counter() - started) / tokens


def plain_decode_through_services(args: argparse.Namespace) -> dict[str, float]:
    """ms/token after the first, and the drafter's gRPC round trip per round less the verifier's
    pass, of greedy plain decoding through a real verifier + drafter on loopback; and the round
    price the verifier published to drafters at start (ModelInfo.price: what it timed there)."""
    from specdec.client import Client
    from specdec.launcher import LocalCluster

    # A prompt whose greedy continuation runs past 128 tokens without an end token (a raw request
    # for a story makes the default model end at once).
    prompt = "Once upon a time, in a lighthouse on a rocky island far from the coast, there lived an old keeper who"
    verifier = ["--model", args.model, "--device", args.device, "--dtype", args.dtype, "--quantization", args.quantization, "--cuda-graphs", str(not args.no_graphs).lower(),
                "--cuda-compiled", args.cuda_compiled, "--cpu-compiled-passes", str(args.cpu_compiled).lower(), "--cpu-onnx-passes", str(not args.no_onnx_passes).lower(),
                "--cpu-one-row-copies", str(not args.no_one_row_copies).lower(), "--cpu-float32-copies", str(not args.no_float32_copies).lower(),
                "--cpu-onednn-copies", str(not args.no_onednn_copies).lower()]
    with tempfile.TemporaryDirectory() as logs, LocalCluster(Path(logs), verifier_args=verifier, drafter_args=["--drafter", "copy"]) as c:
        info = verifier_info(c.verifier.address)
        price = info.price
        with Client(c.address) as client:
            client.generate(prompt, max_new_tokens=8, num_draft_tokens=0, temperature=0.0)  # warm-up
            runs = [client.generate(prompt, max_new_tokens=args.decode_tokens, num_draft_tokens=0, temperature=0.0).stats for _ in range(3)]
    short = [s.generated_tokens for s in runs if s.generated_tokens < args.decode_tokens]
    if short:  # an early end token would time a few tokens as if they were all
        raise RuntimeError(f"plain decoding through the services ended early: {short} of {args.decode_tokens} tokens")
    decode = [(s.total_seconds - s.time_to_first_token_seconds) / (s.generated_tokens - 1) for s in runs]
    network = [s.network_seconds / max(1, s.rounds) for s in runs]
    return {
        "ms_per_token": 1000 * statistics.median(decode), "grpc_round_trip_ms": 1000 * statistics.median(network),
        "price": {"plain_ms": 1000 * price.plain_seconds, "node_cost": price.node_cost, "round_overhead": price.round_overhead},
        "engine": info.engine,
    }


def pass_curve(target: TargetModel, batches: Sequence[int], context: int, max_new: int, repeats: int) -> dict[int, list[float]]:
    """{B: [t(1), ..., t(max_new)] seconds}: a pass of n new tokens in each of B sessions (a lone
    session runs TargetModel.score, as the verifier does; B > 1 runs score_batch)."""
    curve: dict[int, list[float]] = {}
    for batch in batches:
        caches = prefilled(target, batch, context)
        times = []
        for n in range(1, max_new + 1):
            inputs = [PassInput(c, [5000], chain([6000 + j for j in range(n - 1)])) for c in caches]

            def run() -> object:
                if batch == 1:
                    return target.score(inputs[0].cache, inputs[0].pending, inputs[0].tree)
                return score_batch(target, inputs)

            def reset() -> None:
                for cache in caches:
                    cache.truncate(context)

            times.append(median_seconds(run, repeats, reset))
        curve[batch] = times
        print(f"  B={batch}: " + " ".join(f"{1000 * t:.1f}" for t in times) + " ms", file=sys.stderr, flush=True)
    return curve


def device_options(args: argparse.Namespace) -> str:
    """The report heading's note of the device's options: CUDA ones turned off, compiled CPU
    passes on, weight copies off."""
    if args.device == "cpu":
        return (", int8 weights" if args.quantization == "int8" else "") + (", compiled lone passes" if args.cpu_compiled else "") + (", no onnxruntime passes" if args.no_onnx_passes else "") + (", no one-row copies" if args.no_one_row_copies else "") + (
            ", no float32 copies" if args.no_float32_copies else "") + (", no oneDNN copies" if args.no_onednn_copies else "")
    return ", CUDA graphs off" if args.no_graphs else f", graphs with {args.cuda_compiled} compiled"


def report(args: argparse.Namespace, results: dict) -> str:
    floor = results["floor"]
    lines = [
        f"# Engine profile: {args.model} on {args.device}, {args.dtype}" + device_options(args),
        "",
        f"machine: {results['machine']['cpu_model']}, {results['machine']['usable_cpus']} usable CPUs, torch {results['machine']['torch']}, "
        f"commit {results['machine']['git_commit']}; {args.context} cached tokens a session; medians of {args.repeats}"
        + ("; one-row copies kept by the start-up timing" if results.get("one_row") else "")
        + ("; float32 copies kept by the start-up timing" if results.get("float32_rows") else "")
        + (f"; oneDNN copies read from {results['onednn_min_rows']} rows by the start-up timing" if results.get("onednn_min_rows") else ""),
        "",
        "| quantity | ms/token | tok/s | / floor |",
        "|---|---|---|---|",
        f"| memory floor ({floor['weight_mb']:.0f} MB of weights at {floor['read_gbs']:.1f} GB/s) | {floor['ms']:.2f} | {1000 / floor['ms']:.1f} | 1.00 |",
    ]
    for name, key in (("plain decoding, in-process", "in_process_ms"), ("plain decoding, through the services", "services_ms")):
        if key in results:
            ms = results[key]
            lines.append(f"| {name} | {ms:.2f} | {1000 / ms:.1f} | {ms / floor['ms']:.2f} |")
    lines += ["", "Verify-pass cost t(n)/t(1), n new tokens per session (t(1) in ms):", ""]
    n_max = max(len(v) for v in results["curve"].values())
    lines.append("| sessions B | t(1) ms | " + " | ".join(str(n) for n in range(2, n_max + 1)) + " |")
    lines.append("|---|---|" + "---|" * (n_max - 1))
    for batch, times in results["curve"].items():
        lines.append(f"| {batch} | {1000 * times[0]:.1f} | " + " | ".join(f"{t / times[0]:.2f}" for t in times[1:]) + " |")
    onnx = (" (lone passes through onnxruntime: their parts by onnxruntime's profiler, the rest of the wall time between its kernels)" if results.get("onnx_passes")
            else " (every pass in torch: onnxruntime's passes are off, for this model or by the verifier's start check)" if args.device == "cpu" and not args.no_onnx_passes
            and args.dtype == "float32" and args.quantization == "none" else "")
    lines += ["", f"Per-pass breakdown (ms, lone session){onnx}:", "", "| part | " + " | ".join(f"n={n}" for n in results["breakdown"]) + " |"]
    lines.append("|---|" + "---|" * len(results["breakdown"]))
    parts = list(next(iter(results["breakdown"].values())))
    for part in parts:
        lines.append(f"| {part} | " + " | ".join(f"{b[part]:.2f}" for b in results["breakdown"].values()) + " |")
    if "grpc_round_trip_ms" in results:
        lines.append(f"| gRPC round trip per round (drafter's, less the pass) | {results['grpc_round_trip_ms']:.2f} |" + " |" * (len(results["breakdown"]) - 1))
    if "price" in results:
        price = results["price"]
        lines += ["", f"The round price the verifier published at start (ModelInfo.price): a plain pass {price['plain_ms']:.2f} ms; "
                      f"a drafted node {price['node_cost']:.3f} and a drafted round {price['round_overhead']:.3f} more plain passes."]
    if results.get("services_engine"):
        lines += ["", f"The services' verifier ran its passes as (ModelInfo.engine): {results['services_engine']}."]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    # Loaded, warmed and tuned as the verifier service does it.
    target, _ = load_target(VerifierSettings(model=args.model, device=args.device, dtype=args.dtype, quantization=args.quantization, cuda_graphs=not args.no_graphs, cuda_compiled=args.cuda_compiled,
                                       cpu_compiled_passes=args.cpu_compiled, cpu_onnx_passes=not args.no_onnx_passes, cpu_one_row_copies=not args.no_one_row_copies,
                                       cpu_float32_copies=not args.no_float32_copies, cpu_onednn_copies=not args.no_onednn_copies))
    model = target.model
    results: dict = {"machine": describe(), "args": {k: str(v) for k, v in vars(args).items()}, "one_row": getattr(target.backend, "one_row", False),
                     "float32_rows": getattr(target.backend, "float32_rows", False), "onednn_min_rows": getattr(target.backend, "onednn_min_rows", 0),
                     "onnx_passes": getattr(target.backend, "onnx", None) is not None}  # kept after the verifier's start check
    bandwidth = read_bandwidth(args.device)
    weights = weight_bytes(model)
    results["floor"] = {"weight_mb": weights / 1e6, "read_gbs": bandwidth / 1e9, "ms": 1000 * weights / bandwidth}
    print("plain decoding in-process ...", file=sys.stderr, flush=True)
    results["in_process_ms"] = 1000 * plain_decode_in_process(target, args.context, args.decode_tokens)
    print("verify-pass curve ...", file=sys.stderr, flush=True)
    results["curve"] = pass_curve(target, args.batches, args.context, args.max_new, args.repeats)
    print("per-pass breakdown ...", file=sys.stderr, flush=True)
    results["breakdown"] = {n: pass_breakdown(target, args.context, n, args.repeats) for n in sorted({1, min(8, args.max_new)})}
    del model, target
    if not args.no_services:
        print("plain decoding through the services ...", file=sys.stderr, flush=True)
        services = plain_decode_through_services(args)
        results["services_ms"] = services["ms_per_token"]
        results["grpc_round_trip_ms"] = services["grpc_round_trip_ms"]
        results["price"] = services["price"]
        results["services_engine"] = services["engine"]
    print(report(args, results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
