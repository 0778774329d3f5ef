"""Load benchmark: N concurrent clients against one drafter + one verifier, speculation on vs off.

For each N (default 1 2 4 8 16 32) and each mode (on: the drafter's default speculation; off:
num_draft_tokens = 0, one target pass per token), N asyncio clients each send Spec-Bench prompts
(client i starts at prompt i, round-robin over the rows) back to back for `--seconds`; a
request started inside the window runs to its end and counts. Per (N, mode): aggregate
throughput (generated tokens / wall time from start until the last request ends), p50/p99
time to first token, p50/p99 per-token latency ((last - first token time) / (tokens - 1) per
request). Greedy decoding. Prints a markdown table and writes JSON (and a PNG when matplotlib is
installed) under bench/results/.

    flock /tmp/specdec-cpu.lock python -m bench.load_bench --clients 1 2 4 8 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from bench import machine
from bench.prompts import QUESTIONS_FILE, TASKS, Prompt, bench_dir, load_questions, select
from specdec.client import AsyncClient
from specdec.launcher import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    p.add_argument("--seconds", type=float, default=20.0, help="window per (N, mode)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--per-row", type=int, default=6, help="prompts per Spec-Bench task")
    p.add_argument("--verifier-arg", action="append", default=[], help="extra flag for the verifier (repeatable)")
    p.add_argument("--drafter-arg", action="append", default=[], help="extra flag for the drafter (repeatable)")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def one_client(client: AsyncClient, prompts: Sequence[Prompt], start: int, until: float, max_new_tokens: int,
                     speculate: bool, samples: list[dict]) -> None:
    i = start
    while time.perf_counter() < until:
        prompt = prompts[i % len(prompts)]
        i += 1
        sent = time.perf_counter()
        times: list[float] = []
        tokens = 0
        stats = None
        kwargs = {} if speculate else {"num_draft_tokens": 0}
        async for chunk in client.stream(messages=prompt.messages, max_new_tokens=max_new_tokens, temperature=0.0, **kwargs):
            if chunk.token_ids:
                times.append(time.perf_counter())
                tokens += len(chunk.token_ids)
            stats = chunk.stats or stats
        if tokens:
            samples.append({
                "tokens": tokens,
                "ttft": times[0] - sent,
                "per_token": (times[-1] - times[0]) / (tokens - 1) if tokens > 1 else None,
                "rounds": stats.rounds if stats else 0,
                "drafted": stats.drafted_tokens if stats else 0,
                "accepted": stats.accepted_tokens if stats else 0,
            })


async def measure(address: str, prompts: Sequence[Prompt], clients: int, seconds: float, max_new_tokens: int, speculate: bool) -> dict:
    samples: list[dict] = []
    async with AsyncClient(address) as client:  # one channel, many streams
        started = time.perf_counter()
        until = started + seconds
        await asyncio.gather(*(one_client(client, prompts, k, until, max_new_tokens, speculate, samples) for k in range(clients)))
        elapsed = time.perf_counter() - started
    ttft = [s["ttft"] for s in samples]
    per_token = [s["per_token"] for s in samples if s["per_token"] is not None]
    return {
        "clients": clients,
        "speculation": speculate,
        "requests": len(samples),
        "tokens": sum(s["tokens"] for s in samples),
        "seconds": elapsed,
        "tokens_per_second": sum(s["tokens"] for s in samples) / elapsed,
        "ttft_p50": percentile(ttft, 0.5),
        "ttft_p99": percentile(ttft, 0.99),
        "per_token_p50": percentile(per_token, 0.5),
        "per_token_p99": percentile(per_token, 0.99),
        # What speculation did: drafted tokens and target passes per generated token.
        "drafted_per_token": sum(s["drafted"] for s in samples) / max(1, sum(s["tokens"] for s in samples)),
        "passes_per_token": sum(s["rounds"] for s in samples) / max(1, sum(s["tokens"] for s in samples)),
    }


def table(rows: Sequence[dict]) -> str:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{1000 * x:.0f}"

    by = {(r["clients"], r["speculation"]): r for r in rows}
    lines = [
        "| N | tok/s spec | tok/s plain | spec/plain | TTFT p50/p99 ms spec | TTFT p50/p99 ms plain | per-token p50/p99 ms spec | per-token p50/p99 ms plain | spec: drafted / passes per token |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sorted({r["clients"] for r in rows}):
        on, off = by.get((n, True)), by.get((n, False))
        if not on or not off:
            continue
        lines.append(
            f"| {n} | {on['tokens_per_second']:.1f} | {off['tokens_per_second']:.1f} | {on['tokens_per_second'] / off['tokens_per_second']:.2f} "
            f"| {ms(on['ttft_p50'])}/{ms(on['ttft_p99'])} | {ms(off['ttft_p50'])}/{ms(off['ttft_p99'])} "
            f"| {ms(on['per_token_p50'])}/{ms(on['per_token_p99'])} | {ms(off['per_token_p50'])}/{ms(off['per_token_p99'])} "
            f"| {on.get('drafted_per_token', 0):.2f} / {on.get('passes_per_token', 0):.2f} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for speculate, label in ((True, "speculation on"), (False, "speculation off")):
        points = sorted((r["clients"], r["tokens_per_second"]) for r in rows if r["speculation"] is speculate)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent clients N")
    ax.set_ylabel("aggregate tokens/s")
    ax.set_title("specdec load benchmark (greedy, one CPU verifier)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    prompts = select(load_questions(bench_dir() / QUESTIONS_FILE), list(TASKS), args.per_row)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    described = machine.describe()  # before the run: the commit measured, not whatever is checked out at its end
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as logs, LocalCluster(Path(logs), verifier_args=args.verifier_arg, drafter_args=args.drafter_arg) as cluster:
        for n in args.clients:
            for speculate in (True, False):
                row = asyncio.run(measure(cluster.address, prompts, n, args.seconds, args.max_new_tokens, speculate))
                rows.append(row)
                print(f"N={n:>2} spec={'on ' if speculate else 'off'} {row['tokens_per_second']:7.1f} tok/s "
                      f"({row['requests']} requests, {row['seconds']:.1f} s, {row['drafted_per_token']:.2f} drafted "
                      f"and {row['passes_per_token']:.2f} passes per token)", flush=True)
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / f"load_bench-{stamp}"
    base.with_suffix(".json").write_text(json.dumps({"argv": list(argv), "machine": described, "rows": rows}, indent=2))
    base.with_suffix(".md").write_text(table(rows) + "\n")
    if plot(rows, base.with_suffix(".png")):
        print(f"wrote {base}.json, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
