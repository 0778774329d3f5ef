"""Load benchmark: N concurrent clients against one drafter + one verifier, speculation on vs off.

For each N (default 1 2 4 8 16 32) the benchmark runs pairs of halves, one half with the
drafter's default speculation and one with it off (num_draft_tokens = 0), in alternating order
(on/off, off/on, ...) so that drift of the machine falls on both modes alike. In a half, N
concurrent clients on one channel send requests for a fixed time, each client the next prompt
as soon as its last request ended (prompts s, s + 1, ... cycling over the Spec-Bench rows; both
halves of a pair start at the same s, the next pair after the prompts either half reached). The
measured window opens when every client has its first token, so the load is N sessions
throughout, and lasts `--window` seconds; the tokens that arrived inside it count, and the
requests still running at its end are cancelled (the next half starts when the verifier holds
no session). Decoding is greedy and speculation exact, so both halves generate the same tokens
from the same prompts, the faster half further along them. Client i's first request of a half
asks for (i + 1) / N of `--max-new-tokens` (`first_request_tokens`) and is left out of the
latency samples, so the requests in flight are spread over their lives as in a steady state:
started together with equal lengths, plain decoding's requests end and restart together, and a
window about two requests' lives long counted more prompt rows per generated token in one mode
than in the other (docs/benchmarks.md, Load). Pairs repeat until `--seconds` per N is spent, at
least `--min-pairs` and at most `--max-pairs`; the median of the pairs' ratios, with its min-max
spread, and all tokens over all seconds are reported. The verifier runs with its prefix cache
off (`--prefix-cache-tokens=0`) unless a `--verifier-arg` sets it: with it on, the second half
of a pair reuses the prefills the first half paid for, and the mode that runs first over new
prompts loses (at N = 16 here, speculation first: pairs 0.56-0.78 against 0.88-1.00).

Per (N, mode): aggregate throughput (tokens in the windows / their seconds); over the requests
that finished (each client's first left out), p50/p99 time to first token, p50/p99 per-token
latency ((last - first token time) / (tokens - 1) per request), drafted nodes and target passes
per token; over the windows, the CPU milliseconds per generated token each service's process
used (all its threads: a drafter's work beside the verifier shows here even when it drafts
nothing) and the verifier's rounds per pass and rows per generated token (its /metrics
counters; the rows only in the JSON). Prints a markdown table and writes JSON and a PNG (with
matplotlib) under bench/results/.

    flock /tmp/specdec-cpu.lock python -m bench.load_bench --clients 1 2 4 8 16 32 --seconds 60 \
        --max-new-tokens 48 --per-row 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from bench import machine
from bench.prompts import TASKS, Prompt, add_prompts_flag, load_bench_questions, select
from specdec.client import AsyncClient
from specdec.launcher import LocalCluster, Service, free_port
from specdec.metrics import scrape_metrics

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    p.add_argument("--seconds", type=float, default=60.0, help="time per N; pairs repeat until it is spent")
    p.add_argument("--window", type=float, default=20.0, help="measured seconds per half (mode) of a pair")
    p.add_argument("--min-pairs", type=int, default=3, help="on/off pairs per N at least")
    p.add_argument("--max-pairs", type=int, default=12, help="on/off pairs per N at most")
    p.add_argument("--warm-window", type=float, default=5.0,
                   help="an unmeasured half per N and mode before its pairs, this long: the first pair (speculation "
                        "first) would otherwise start from the state the previous N left")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--per-row", type=int, default=4, help="prompts per Spec-Bench task")
    p.add_argument("--verifier-arg", action="append", default=[], help="extra flag for the verifier (repeatable)")
    p.add_argument("--drafter-arg", action="append", default=[], help="extra flag for the drafter (repeatable)")
    add_prompts_flag(p)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--render", type=Path, help="only redraw the table (.md) and plot (.png) of this run's JSON")
    return p.parse_args(argv)


def verifier_flags(extra: Sequence[str]) -> list[str]:
    """The verifier's flags: `extra`, with the prefix cache off unless `extra` sets it (module
    docstring)."""
    return list(extra) if any(a.startswith("--prefix-cache-tokens") for a in extra) else ["--prefix-cache-tokens=0", *extra]


def first_request_tokens(index: int, clients: int, max_new_tokens: int) -> int:
    """The new tokens client `index` (of `clients`) asks for in its first request of a half:
    ceil((index + 1) / clients x max_new_tokens), at least 1 (module docstring)."""
    return max(1, -(-(index + 1) * max_new_tokens // clients))


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def one_request(
    client: AsyncClient, prompt: Prompt, max_new_tokens: int, speculate: bool, record: dict, arrived: Callable[[dict], None]
) -> None:
    """Stream one request into `record`: each chunk's arrival time and token count as it comes (so
    a request cancelled at the window's end still counts what arrived; `arrived` is told of each),
    then its statistics."""
    record |= {"sent": time.perf_counter(), "arrivals": []}
    kwargs = {} if speculate else {"num_draft_tokens": 0}
    stream = client.stream(messages=prompt.messages, max_new_tokens=max_new_tokens, temperature=0.0, **kwargs)
    async with contextlib.aclosing(stream):  # a cancelled request cancels its call
        async for chunk in stream:
            if chunk.token_ids:
                record["arrivals"].append((time.perf_counter(), len(chunk.token_ids)))
                arrived(record)
            if chunk.stats:
                record["stats"] = chunk.stats


def _sample(record: dict) -> dict | None:
    """A finished request's latencies and what speculation did; None for one cut off or empty."""
    stats, arrivals = record.get("stats"), record.get("arrivals")
    if stats is None or not arrivals:
        return None
    tokens = sum(n for _, n in arrivals)
    first, last = arrivals[0][0], arrivals[-1][0]
    return {
        "tokens": tokens,
        "ttft": first - record["sent"],
        "per_token": (last - first) / (tokens - 1) if tokens > 1 else None,
        "rounds": stats.rounds,
        "drafted": stats.drafted_tokens,
        "drafter": stats.drafter,
        "accepted": stats.accepted_tokens,
    }


# The verifier's counters read around each round (specdec/metrics.py): passes, rounds in them,
# new tokens through the target, seconds in passes.
PASS_COUNTERS = {
    "passes": "specdec_verifier_batch_size_count",
    "pass_rounds": "specdec_verifier_batch_size_sum",
    "pass_tokens": "specdec_verifier_pass_tokens_total",
    "pass_seconds": "specdec_verifier_pass_seconds_sum",
}
OPEN_SESSIONS = "specdec_verifier_open_sessions"


class Meters:
    """What the services used: CPU seconds per process, and the verifier's pass counters."""

    def __init__(self, cluster: LocalCluster, verifier_metrics_port: int) -> None:
        self.services: tuple[Service, ...] = (cluster.drafter, cluster.verifier)
        self.port = verifier_metrics_port

    def _metrics(self) -> dict[str, float]:
        """The verifier's /metrics samples, by series name."""
        return scrape_metrics(self.port)

    def read(self) -> dict[str, float | None]:
        values: dict[str, float | None] = {f"{s.kind}_cpu_seconds": s.cpu_seconds() for s in self.services}
        samples = self._metrics()
        return values | {key: samples.get(name) for key, name in PASS_COUNTERS.items()}

    async def idle(self, timeout: float = 60.0) -> None:
        """Wait until the verifier holds no session: the cancelled requests of a half are freed
        before the next half starts."""
        deadline = time.perf_counter() + timeout
        while (await asyncio.to_thread(self._metrics)).get(OPEN_SESSIONS, 0) and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)


def _used(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
    return {k: None if before[k] is None or after[k] is None else after[k] - before[k] for k in before}  # type: ignore[operator]


async def run_half(
    client: AsyncClient, prompts: Sequence[Prompt], start: int, clients: int, window: float, max_new_tokens: int,
    speculate: bool, meters: Meters,
) -> dict:
    """N = `clients` clients sending prompts start, start + 1, ... (cycling; each client takes the
    next prompt when its request ends) in one mode. The window opens when every client has its
    first token (the first prefills are behind it; each client's first request staggered:
    first_request_tokens) and lasts `window` seconds; then every request still running is
    cancelled. Tokens are those that arrived inside the window; samples are the requests after
    each client's first that finished; `used` is what the services spent inside the window (Meters)."""
    records: list[dict] = []
    todo = (prompts[(start + k) % len(prompts)] for k in itertools.count())
    live: set[int] = set()  # clients that have had a token
    opened = asyncio.Event()

    def arrived(record: dict) -> None:
        live.add(record["client"])
        if len(live) == clients:
            opened.set()

    async def one_client(index: int) -> None:
        first = True
        for prompt in todo:  # shared: each prompt goes to the first client free
            records.append({"client": index, "first": first})
            tokens = first_request_tokens(index, clients, max_new_tokens) if first else max_new_tokens
            await one_request(client, prompt, tokens, speculate, records[-1], arrived)
            first = False

    tasks = [asyncio.ensure_future(one_client(i)) for i in range(clients)]
    opening = asyncio.ensure_future(opened.wait())
    await asyncio.wait([opening, *tasks], return_when=asyncio.FIRST_COMPLETED)
    opening.cancel()
    if opened.is_set():
        opened_at, before = time.perf_counter(), await asyncio.to_thread(meters.read)
        await asyncio.sleep(window)
        closed_at, after = time.perf_counter(), await asyncio.to_thread(meters.read)
    for task in tasks:
        task.cancel()
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):  # a request failed: the run is not a measurement
            raise outcome
    await meters.idle()
    if not opened.is_set():
        raise RuntimeError(f"the clients ended before all {clients} had a token")
    tokens = sum(n for r in records for t, n in r.get("arrivals", ()) if opened_at <= t < closed_at)
    samples = [s for s in map(_sample, (r for r in records if not r["first"])) if s is not None]
    return {"tokens": tokens, "seconds": closed_at - opened_at, "samples": samples, "used": _used(before, after),
            "requests": len(records)}


async def measure(
    cluster: LocalCluster, meters: Meters, prompts: Sequence[Prompt], clients: int, args: argparse.Namespace
) -> tuple[list[dict], list[dict]]:
    """Paired halves at N = clients (module docstring): the two modes' rows and the pairs."""
    runs: dict[bool, list[dict]] = {True: [], False: []}
    pairs: list[dict] = []
    async with AsyncClient(cluster.address) as client:  # one channel, many streams
        for speculate in (True, False):  # not measured: see parse_args
            await run_half(client, prompts, 0, clients, args.warm_window, args.max_new_tokens, speculate, meters)
        started, start = time.perf_counter(), 0
        while len(pairs) < args.min_pairs or (len(pairs) < args.max_pairs and time.perf_counter() - started < args.seconds):
            r = len(pairs)
            pair: dict[bool, dict] = {}
            for speculate in ((True, False) if r % 2 == 0 else (False, True)):
                pair[speculate] = await run_half(client, prompts, start, clients, args.window, args.max_new_tokens, speculate, meters)
                runs[speculate].append(pair[speculate])
            start += max(pair[m]["requests"] for m in (True, False))  # the next pair's prompts are new ones
            on, off = (pair[m]["tokens"] / pair[m]["seconds"] for m in (True, False))
            pairs.append({"clients": clients, "spec_tokens_per_second": on, "plain_tokens_per_second": off, "ratio": on / off,
                          "spec_tokens": pair[True]["tokens"], "plain_tokens": pair[False]["tokens"],
                          "spec_used": pair[True]["used"], "plain_used": pair[False]["used"]})
            drafters = Counter(s["drafter"] for s in pair[True]["samples"])
            per_pass = [_ratio([pair[m]], "pass_rounds", "passes") for m in (True, False)]
            print(f"N={clients:>2} pair {r}: spec {on:6.1f} plain {off:6.1f} tok/s, ratio {on / off:.2f}; rounds per pass "
                  f"{' / '.join('-' if x is None else f'{x:.1f}' for x in per_pass)}; spec drafters {dict(drafters)}", flush=True)
    return [summarize(clients, m, runs[m], pairs) for m in (True, False)], pairs


def summarize(clients: int, speculate: bool, rounds: Sequence[dict], pairs: Sequence[dict]) -> dict:
    samples = [s for r in rounds for s in r["samples"]]
    tokens = sum(r["tokens"] for r in rounds)
    seconds = sum(r["seconds"] for r in rounds)
    ratios = [p["ratio"] for p in pairs]
    ttft = [s["ttft"] for s in samples]
    per_token = [s["per_token"] for s in samples if s["per_token"] is not None]
    return {
        "clients": clients,
        "speculation": speculate,
        "requests": len(samples),
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_second": tokens / seconds,
        # Per pair: this mode's throughput; and the pairs' spec/plain ratios (the same in both rows).
        "pair_tokens_per_second": [p["spec_tokens_per_second" if speculate else "plain_tokens_per_second"] for p in pairs],
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "pairs": len(pairs),
        "ttft_p50": percentile(ttft, 0.5),
        "ttft_p99": percentile(ttft, 0.99),
        "per_token_p50": percentile(per_token, 0.5),
        "per_token_p99": percentile(per_token, 0.99),
        # What speculation did: drafted tokens and target passes per generated token.
        "drafted_per_token": sum(s["drafted"] for s in samples) / max(1, sum(s["tokens"] for s in samples)),
        "passes_per_token": sum(s["rounds"] for s in samples) / max(1, sum(s["tokens"] for s in samples)),
        # CPU milliseconds per generated token, per service process; the verifier's passes (None where unknown).
        **{f"{kind}_cpu_ms_per_token": _per_token(rounds, f"{kind}_cpu_seconds", tokens, 1000) for kind in ("drafter", "verifier")},
        "verifier_passes_per_token": _per_token(rounds, "passes", tokens),
        # Rows through the target a generated token (prompts', rounds', drafted nodes'): the
        # prompts' share should not differ between the modes (module docstring).
        "verifier_rows_per_token": _per_token(rounds, "pass_tokens", tokens),
        "rounds_per_pass": _ratio(rounds, "pass_rounds", "passes"),
    }


def _total(rounds: Sequence[dict], key: str) -> float | None:
    used = [r.get("used", {}).get(key) for r in rounds]
    return None if not used or None in used else sum(used)  # type: ignore[arg-type]


def _per_token(rounds: Sequence[dict], key: str, tokens: int, scale: float = 1.0) -> float | None:
    total = _total(rounds, key)
    return None if total is None else scale * total / max(1, tokens)


def _ratio(rounds: Sequence[dict], key: str, per: str) -> float | None:
    total, count = _total(rounds, key), _total(rounds, per)
    return None if total is None or not count else total / count


def table(rows: Sequence[dict]) -> str:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{1000 * x:.0f}"

    def num(row: dict, key: str) -> str:
        return "-" if row.get(key) is None else f"{row[key]:.1f}"

    def cpu(row: dict) -> str:
        return " / ".join("-" if row.get(f"{k}_cpu_ms_per_token") is None else f"{row[f'{k}_cpu_ms_per_token']:.0f}" for k in ("drafter", "verifier"))

    by = {(r["clients"], r["speculation"]): r for r in rows}
    lines = [
        "| N | tok/s spec | tok/s plain | spec/plain | pairs' spec/plain: median (min-max) | pairs | TTFT p50/p99 ms spec | TTFT p50/p99 ms plain "
        "| per-token p50/p99 ms spec | per-token p50/p99 ms plain | spec: drafted / passes per token "
        "| CPU ms per token, drafter / verifier: spec | plain | rounds per verifier pass: spec | plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sorted({r["clients"] for r in rows}):
        on, off = by.get((n, True)), by.get((n, False))
        if not on or not off:
            continue
        lines.append(
            f"| {n} | {on['tokens_per_second']:.1f} | {off['tokens_per_second']:.1f} | {on['tokens_per_second'] / off['tokens_per_second']:.2f} "
            f"| {on['ratio_median']:.2f} ({on['ratio_min']:.2f}-{on['ratio_max']:.2f}) | {on['pairs']} "
            f"| {ms(on['ttft_p50'])}/{ms(on['ttft_p99'])} | {ms(off['ttft_p50'])}/{ms(off['ttft_p99'])} "
            f"| {ms(on['per_token_p50'])}/{ms(on['per_token_p99'])} | {ms(off['per_token_p50'])}/{ms(off['per_token_p99'])} "
            f"| {on.get('drafted_per_token', 0):.2f} / {on.get('passes_per_token', 0):.2f} | {cpu(on)} | {cpu(off)} | {num(on, 'rounds_per_pass')} | {num(off, 'rounds_per_pass')} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict], path: Path) -> bool:
    """Left: aggregate throughput per mode (bars: min-max over pairs); right: spec/plain per pair."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for speculate, label in ((True, "speculation on"), (False, "speculation off")):
        mine = sorted((r for r in rows if r["speculation"] is speculate), key=lambda r: r["clients"])
        n = [r["clients"] for r in mine]
        y = [r["tokens_per_second"] for r in mine]
        low = [y_ - min(r["pair_tokens_per_second"]) for y_, r in zip(y, mine)]
        high = [max(r["pair_tokens_per_second"]) - y_ for y_, r in zip(y, mine)]
        left.errorbar(n, y, yerr=[[max(0.0, v) for v in low], [max(0.0, v) for v in high]], marker="o", capsize=3, label=label)
    left.set_ylabel("aggregate tokens/s (bars: min-max over pairs)")
    left.set_ylim(bottom=0)
    left.legend()
    on = sorted((r for r in rows if r["speculation"]), key=lambda r: r["clients"])
    plain = {r["clients"]: r["tokens_per_second"] for r in rows if not r["speculation"]}
    right.plot([r["clients"] for r in on], [r["tokens_per_second"] / plain[r["clients"]] for r in on], marker="s", label="all pairs' tokens / seconds")
    right.plot([r["clients"] for r in on], [r["ratio_median"] for r in on], marker="o", label="median of pairs")
    right.fill_between([r["clients"] for r in on], [r["ratio_min"] for r in on], [r["ratio_max"] for r in on], alpha=0.2, label="min-max")
    right.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    right.set_ylabel("throughput, speculation on / off")
    right.legend()
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients N")
        ax.grid(True, alpha=0.3)
    fig.suptitle("specdec load benchmark (greedy, one 2-core CPU verifier, paired on/off rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.render:
        rows = json.loads(args.render.read_text())["rows"]
        args.render.with_suffix(".md").write_text(table(rows) + "\n")
        plot(rows, args.render.with_suffix(".png"))
        print(table(rows))
        return 0
    prompts = select(load_bench_questions(args.prompts), list(TASKS), args.per_row)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    described = machine.describe()  # before the run: the commit measured, not whatever is checked out at its end
    rows: list[dict] = []
    pairs: list[dict] = []
    port = free_port()
    verifier_args = [*verifier_flags(args.verifier_arg), f"--metrics-port={port}"]
    with tempfile.TemporaryDirectory() as logs, LocalCluster(Path(logs), verifier_args=verifier_args, drafter_args=args.drafter_arg) as cluster:
        meters = Meters(cluster, port)
        # One request first, not measured: the first passes of a fresh process are slower.
        asyncio.run(_warm_up(cluster.address, prompts[0]))
        for n in args.clients:
            n_rows, n_pairs = asyncio.run(measure(cluster, meters, prompts, n, args))
            rows += n_rows
            pairs += n_pairs
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / f"load_bench-{stamp}"
    base.with_suffix(".json").write_text(json.dumps(
        {"argv": list(argv), "verifier_args": verifier_args, "machine": described, "rows": rows, "pairs": pairs}, indent=2))
    base.with_suffix(".md").write_text(table(rows) + "\n")
    if plot(rows, base.with_suffix(".png")):
        print(f"wrote {base}.json, .md, .png")
    return 0


async def _warm_up(address: str, prompt: Prompt) -> None:
    async with AsyncClient(address) as client:
        await one_request(client, prompt, 8, True, {}, lambda record: None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
