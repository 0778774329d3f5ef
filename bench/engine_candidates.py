"""Candidate CPU engines for the target pass, timed side by side in one process.

For each candidate: a lone pass of 1 token and of 8 tokens (a root and a 7-node chain) after a
256-token cache, through TargetModel.score (the served path: the model's own forward with the
tree mask), the candidates taking turns so that a burst of contention hits them alike; each
reported time is the minimum and the median over the turns. Numerics: the 8-token pass's logits
against fp32 F.linear's (max |difference|, and whether every row's argmax agrees).

Candidates: fp32 and bf16 weights, each with the linear layers weight first (linear_layout.py)
and through F.linear; with --packed, fp32 F.linear on MKL-packed weights (what inductor's
freezing emits for fp32 linears); with --compile, the model's forward compiled by inductor with
freezing (fp32 and bf16), its compile time reported.

    flock -x /tmp/specdec-cpu.lock python -m bench.engine_candidates --compile
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from bench.machine import describe  # noqa: E402
from specdec.model_files import DEFAULT_MODEL  # noqa: E402
from verifier_svc.model_loader import open_model  # noqa: E402
from verifier_svc.target_model import TargetModel  # noqa: E402
from verifier_svc.token_tree import chain  # noqa: E402

CONTEXT = 256


def mkl_packed(model: torch.nn.Module, rows: int) -> None:
    """Every nn.Linear but the output head runs torch.ops.mkl._mkl_linear on weights packed for `rows` rows."""
    head = model.get_output_embeddings()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            packed = torch.ops.mkl._mkl_reorder_linear_weight(module.weight.detach(), rows)

            def forward(x: torch.Tensor, m: torch.nn.Linear = module, w: torch.Tensor = packed) -> torch.Tensor:
                return torch.ops.mkl._mkl_linear(x, w, m.weight, m.bias, rows)

            module.forward = forward  # type: ignore[method-assign]


class Candidate:
    """A named TargetModel and a pass function over (cache, pending, tree)."""

    def __init__(self, name: str, target: TargetModel, weight_first: bool) -> None:
        self.name, self.target = name, target
        target.backend.weight_first = weight_first
        self.cache = target.new_cache()
        target.score(self.cache, [1000 + i for i in range(CONTEXT)], chain([]))
        self.times: dict[int, list[float]] = {1: [], 8: []}

    def run(self, new: int) -> torch.Tensor:
        self.cache.truncate(CONTEXT)
        started = time.perf_counter()
        logits = self.target.score(self.cache, [5000], chain([6000 + j for j in range(new - 1)]))
        self.times[new].append(time.perf_counter() - started)
        return logits


def build(args: argparse.Namespace) -> tuple[list[Candidate], dict[str, float]]:
    fp32, _ = open_model(DEFAULT_MODEL, "cpu", torch.float32)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    cands = [
        Candidate("fp32 F.linear", TargetModel(fp32, "fp32"), False),
        Candidate("fp32 weight first", TargetModel(fp32, "fp32"), True),
        Candidate("bf16 F.linear", TargetModel(bf16, "bf16"), False),
        Candidate("bf16 weight first", TargetModel(bf16, "bf16"), True),
    ]
    compile_seconds: dict[str, float] = {}
    if args.packed:
        packed = copy.deepcopy(fp32)
        mkl_packed(packed, 1)
        cands.append(Candidate("fp32 MKL-packed (M=1)", TargetModel(packed, "packed"), False))
    if args.compile:
        import torch._inductor.config as inductor

        inductor.freezing = True
        inductor.cpp_wrapper = args.cpp_wrapper
        for name, base in (("fp32", fp32), ("bf16", bf16)):
            model = copy.deepcopy(base)
            target = TargetModel(model, name)
            target.backend.weight_first = False
            model.forward = torch.compile(model.forward, dynamic=False)  # type: ignore[method-assign]
            started = time.perf_counter()
            cand = Candidate(f"{name} inductor (freezing)", target, False)
            for new in (1, 8):
                cand.run(new)
                cand.run(new)
            compile_seconds[cand.name] = time.perf_counter() - started
            cand.times = {1: [], 8: []}
            cands.append(cand)
    return cands, compile_seconds


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--packed", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--cpp-wrapper", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cands, compile_seconds = build(args)
    reference = cands[0].run(8)
    numerics: dict[str, tuple[float, bool]] = {}
    for cand in cands:
        logits = cand.run(8)
        numerics[cand.name] = (float((logits - reference).abs().max()), bool((logits.argmax(-1) == reference.argmax(-1)).all()))
        cand.times = {1: [], 8: []}
    for _ in range(args.turns):
        for new in (1, 8):
            for cand in cands:
                cand.run(new)
    print(describe())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {CONTEXT}-token cache, {args.turns} turns\n")
    print("| candidate | 1 token min / median ms | 8 tokens min / median ms | max abs logit diff vs fp32 F.linear (8 rows) | argmax agrees | compile s |")
    print("|---|---|---|---|---|---|")
    for cand in cands:
        one, eight = cand.times[1], cand.times[8]
        diff, agrees = numerics[cand.name]
        compiled = f"{compile_seconds[cand.name]:.0f}" if cand.name in compile_seconds else ""
        print(
            f"| {cand.name} | {1000 * min(one):.1f} / {1000 * statistics.median(one):.1f} | "
            f"{1000 * min(eight):.1f} / {1000 * statistics.median(eight):.1f} | {diff:.2e} | {agrees} | {compiled} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
