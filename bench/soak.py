"""Soak test: mixed load with random cancellations and injected faults for a set time (not in CI).

Two verifiers and a drafter run as local processes. `--clients` threads send requests back to
back: a random prompt of a fixed set, greedy (compared token by token with that prompt's
reference output, computed before any fault) or sampled (seeded; counted, not compared), a
random max_new_tokens, and with probability `--cancel-rate` the client walks away after a random
number of chunks (the tokens it got must still be a prefix of the reference). With probability
`--plain-rate` a request decodes without speculation (num_draft_tokens 0; greedy, it must still
equal the reference, which speculated): when it is a verifier's only session, that verifier runs
its next pass ahead of each round (docs/design/ahead-passes.md). Every
`--fault-seconds` one verifier, chosen at random, is killed with SIGKILL and started again on
its port a few seconds later; the drafter resumes the sessions it had elsewhere.

The report (JSON and markdown under bench/results/): requests served, errors by status code,
tokens lost / duplicated / different against the reference (must all be 0), resumes, the
verifiers' passes run ahead and taken (their /metrics, read before each kill and at the end), and the
resident memory (RSS) of each process over time with its growth per 1,000 sessions (least
squares: the drafter's after the first minute, each verifier process's from 30 s after it began
serving).

    flock /tmp/specdec-cpu.lock python -m bench.soak --minutes 10
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import grpc

from bench import machine
from specdec.client import Client
from specdec.launcher import Service, free_port
from specdec.metrics import scrape_metrics
from specdec.v1 import verifier_pb2, verifier_pb2_grpc

RESULTS = Path(__file__).resolve().parent / "results"
AHEAD_PASSES, AHEAD_PASSES_USED = "specdec_verifier_ahead_passes", "specdec_verifier_ahead_passes_used"  # specdec/metrics.py
PROMPTS = [
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
    "Rename the function add to plus: def add(a, b): return a + b",
    "List five European capitals, one per line.",
    "Summarize: The meeting moved to Thursday because the room was booked on Wednesday.",
    "What is 17 times 3? Show the steps.",
]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=40, help="the largest max_new_tokens drawn (and the reference length)")
    p.add_argument("--cancel-rate", type=float, default=0.15)
    p.add_argument("--sampled-rate", type=float, default=0.2, help="share of requests sampled at temperature 0.8")
    p.add_argument("--plain-rate", type=float, default=0.2, help="share of requests decoded without speculation (num_draft_tokens 0)")
    p.add_argument("--fault-seconds", type=float, default=60.0, help="a verifier is killed every this many seconds (0: never)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--render", type=Path, help="print the markdown report of an earlier run's JSON and exit")
    return p.parse_args(argv)


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def slope_per_1000(points: list[tuple[int, float]]) -> float | None:
    """Least-squares MB per 1,000 sessions."""
    if len(points) < 3 or len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / sxx


class Soak:
    def __init__(self, args: argparse.Namespace, logs: Path) -> None:
        self.args = args
        self.logs = logs
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.verifier_args = ["--max-sessions", "16", "--grace-seconds", "10"]
        self.verifier_metrics_ports = [free_port(), free_port()]
        self.incarnation = [0, 0]
        self.serving = [True, True]  # whether each verifier's current process has started serving
        self.verifiers = [self._verifier(i, []) for i in range(2)]
        self.metrics_port = free_port()
        self.drafter = Service(
            "drafter",
            ["--verifier", ",".join(v.address for v in self.verifiers), "--load-poll-seconds", "0.2",
             "--resume-attempts", "40", "--resume-backoff-seconds", "0.1", "--metrics-port", str(self.metrics_port)],
            logs / "drafter.log",
        )
        for service in [*self.verifiers, self.drafter]:
            service.wait_serving(900)
        self.stop = threading.Event()
        self.sessions = 0  # requests started
        self.served = 0  # requests that ended with a finish reason
        self.cancelled = 0
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []
        self.checked = 0
        self.lost = self.duplicated = self.different = 0
        self.mismatches: list[dict] = []
        self.resumes = 0
        self.kills: list[dict] = []
        self.rss: list[dict] = []
        self.references: dict[str, list[int]] = {}
        self.plain = 0  # requests decoded without speculation
        self.ahead = Counter[str]()  # passes run ahead and taken, summed over every verifier process

    def _verifier(self, index: int, extra: list[str]) -> Service:
        args = [*self.verifier_args, "--metrics-port", str(self.verifier_metrics_ports[index]), *extra]
        return Service("verifier", args, self.logs / f"verifier-{index}-{self.incarnation[index]}.log")

    def count_ahead_passes(self, index: int) -> None:
        """Add verifier `index`'s passes run ahead and taken (its /metrics) to the run's sums."""
        try:
            samples = scrape_metrics(self.verifier_metrics_ports[index])
        except OSError:
            return
        with self.lock:
            self.ahead["run"] += samples.get(AHEAD_PASSES, 0.0)
            self.ahead["taken"] += samples.get(AHEAD_PASSES_USED, 0.0)

    def reference_outputs(self) -> None:
        with Client(self.drafter.address) as client:
            for prompt in PROMPTS:
                self.references[prompt] = client.generate(**self._request(prompt, self.args.max_new_tokens)).token_ids

    @staticmethod
    def _request(prompt: str, max_new_tokens: int, seed: int | None = None, plain: bool = False) -> dict:
        return dict(messages=[{"role": "user", "content": prompt}], max_new_tokens=max_new_tokens,
                    temperature=0.0 if seed is None else 0.8, seed=seed, num_draft_tokens=0 if plain else 4)

    def client_loop(self, index: int) -> None:
        rng = random.Random(self.args.seed * 1000 + index)
        with Client(self.drafter.address, timeout=300) as client:
            while not self.stop.is_set():
                prompt = rng.choice(PROMPTS)
                max_new = rng.randint(4, self.args.max_new_tokens)
                sampled = rng.random() < self.args.sampled_rate
                cancel_after = rng.randint(1, 6) if rng.random() < self.args.cancel_rate else None
                plain = rng.random() < self.args.plain_rate
                with self.lock:
                    self.sessions += 1
                    self.plain += plain
                tokens: list[int] = []
                chunks = 0
                try:
                    stream = client.stream(**self._request(prompt, max_new, rng.randrange(2**32) if sampled else None, plain))
                    finish = None
                    for chunk in stream:
                        tokens += chunk.token_ids
                        chunks += 1
                        if chunk.finish_reason:
                            finish = chunk.finish_reason
                            with self.lock:
                                self.resumes += chunk.stats.resumes
                        if cancel_after is not None and chunks >= cancel_after and not finish:
                            stream.close()
                            break
                except grpc.RpcError as error:
                    with self.lock:
                        self.errors[error.code().name] += 1
                        if len(self.error_samples) < 20:
                            self.error_samples.append(f"{error.code().name}: {error.details()}")
                    continue
                with self.lock:
                    if finish:
                        self.served += 1
                    else:
                        self.cancelled += 1
                    if not sampled:
                        self.check(prompt, max_new, tokens, finish)

    def check(self, prompt: str, max_new: int, tokens: list[int], finish: str | None) -> None:
        """Tokens against the reference: a finished greedy request must equal it (cut at
        max_new_tokens), a cancelled one must be a prefix of it."""
        reference = self.references[prompt][:max_new]
        expected = reference if finish else reference[: len(tokens)]
        self.checked += 1
        if tokens == expected:
            return
        self.lost += max(0, len(expected) - len(tokens))
        self.duplicated += max(0, len(tokens) - len(expected))
        self.different += sum(a != b for a, b in zip(tokens, expected))
        if len(self.mismatches) < 10:
            self.mismatches.append({"prompt": prompt, "max_new_tokens": max_new, "finish": finish, "got": tokens, "expected": expected})

    def fault_loop(self) -> None:
        rng = random.Random(self.args.seed + 7)
        while not self.stop.wait(self.args.fault_seconds):
            index = rng.randrange(2)
            victim = self.verifiers[index]
            with self.lock:
                open_sessions = self._open_sessions(victim)
            self.count_ahead_passes(index)
            self.serving[index] = False
            victim.process.kill()
            victim.process.wait()
            killed = time.monotonic()
            time.sleep(rng.uniform(1, 5))
            self.incarnation[index] += 1
            self.verifiers[index] = self._verifier(index, ["--port", str(victim.port)])
            self.verifiers[index].wait_serving(900)
            self.serving[index] = True
            self.kills.append({"verifier": index, "open_sessions_when_killed": open_sessions,
                               "back_after_seconds": round(time.monotonic() - killed, 1)})

    @staticmethod
    def _open_sessions(verifier: Service) -> int:
        try:
            with grpc.insecure_channel(verifier.address) as channel:
                return verifier_pb2_grpc.VerifierStub(channel).GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=5).open_sessions
        except grpc.RpcError:
            return -1

    def memory_loop(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(5):
            sample = {"t": round(time.monotonic() - started, 1), "sessions": self.sessions, "drafter": rss_mb(self.drafter.process.pid)}
            for i, v in enumerate(self.verifiers):
                sample[f"verifier{i}"] = rss_mb(v.process.pid)
                sample[f"verifier{i}_incarnation"] = self.incarnation[i]
                sample[f"verifier{i}_serving"] = self.serving[i]
            self.rss.append(sample)

    def drafter_open_sessions(self) -> float:
        return scrape_metrics(self.metrics_port)["specdec_drafter_open_sessions"]

    def memory_growth(self) -> dict[str, object]:
        return memory_growth(self.rss)

    def shutdown(self) -> int:
        codes = []
        for service in [self.drafter, *self.verifiers]:
            codes.append(service.stop())
        return max(codes, key=abs)


def memory_growth(rss: list[dict]) -> dict[str, object]:
    """MB per 1,000 sessions (all sessions, both verifiers'), least squares: the drafter after
    the first minute; each verifier process from 30 s after it began serving (its start, which
    loads and times passes, took up to 90 s beside a serving verifier on 2 cores), for processes
    that then served at least 60 s more (None otherwise). Runs from before the serving flag was
    sampled count from the process's first sample."""
    warm = [s for s in rss if s["t"] >= 60] or rss
    growth: dict[str, object] = {"drafter": slope_per_1000([(s["sessions"], s["drafter"]) for s in warm if s["drafter"]])}
    for i in range(2):
        lives: dict[int, list[tuple[float, int, float]]] = {}
        for s in rss:
            if s[f"verifier{i}"] and s.get(f"verifier{i}_serving", True):
                lives.setdefault(s[f"verifier{i}_incarnation"], []).append((s["t"], s["sessions"], s[f"verifier{i}"]))
        growth[f"verifier{i}"] = {}
        for life, points in lives.items():
            settled = [(n, mb) for t, n, mb in points if t >= points[0][0] + 30]
            long_enough = settled and points[-1][0] - points[0][0] >= 90
            growth[f"verifier{i}"][life] = slope_per_1000(settled) if long_enough else None  # type: ignore[index]
    return growth


def write_report(soak: Soak, args: argparse.Namespace, seconds: float, leftover: dict) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "stamp": stamp, "minutes": round(seconds / 60, 2), "clients": args.clients, "max_new_tokens": args.max_new_tokens,
        "cancel_rate": args.cancel_rate, "sampled_rate": args.sampled_rate, "plain_rate": args.plain_rate,
        "fault_seconds": args.fault_seconds, "seed": args.seed, "sessions": soak.sessions, "plain_sessions": soak.plain,
        "ahead_passes": dict(soak.ahead), "served": soak.served, "cancelled": soak.cancelled, "errors": dict(soak.errors),
        "error_samples": soak.error_samples, "greedy_checked": soak.checked, "tokens_lost": soak.lost,
        "tokens_duplicated": soak.duplicated, "tokens_different": soak.different, "mismatches": soak.mismatches,
        "resumes": soak.resumes, "verifier_kills": soak.kills, "memory_growth_mb_per_1000_sessions": soak.memory_growth(),
        "rss_mb_first": soak.rss[0] if soak.rss else {}, "rss_mb_last": soak.rss[-1] if soak.rss else {},
        "rss_samples": soak.rss, "after": leftover, "machine": machine.describe(),
    }
    json_path = args.out / f"soak-{stamp}.json"
    json_path.write_text(json.dumps(report, indent=1))
    text = render(report)
    json_path.with_suffix(".md").write_text(text)
    print(text)
    return json_path


def render(report: dict) -> str:
    """The markdown report of a soak run's JSON."""

    def mb(x: object, sign: bool = False) -> str:
        return "n/a" if x is None else f"{x:+.1f}" if sign else f"{x:.0f}"

    growth, first, last = report["memory_growth_mb_per_1000_sessions"], report["rss_mb_first"], report["rss_mb_last"]
    verifier_growth = "; ".join(
        f"verifier {i}: " + ", ".join(f"process {int(life) + 1}: {mb(g, True)}" for life, g in growth[f"verifier{i}"].items())
        for i in range(2)
    )
    kills, ahead = report["verifier_kills"], report.get("ahead_passes", {})
    lines = [
        f"# Soak run {report.get('stamp', '')}", "",
        f"{report['minutes']} minutes, {report['clients']} clients, max_new_tokens 4-{report['max_new_tokens']} "
        f"(greedy requests compared with a reference output per prompt), {report['cancel_rate']:.0%} cancelled by the client "
        f"after 1-6 chunks, {report['sampled_rate']:.0%} sampled at temperature 0.8, {report.get('plain_rate', 0):.0%} decoded "
        f"without speculation; every {report['fault_seconds']:.0f} s one of the two verifiers is killed (SIGKILL) and started "
        "again on its port 1-5 s later.", "",
        "| measure | value |", "|---|---|",
        f"| sessions started | {report['sessions']} |",
        f"| served to the end | {report['served']} |",
        f"| cancelled by the client | {report['cancelled']} |",
        f"| errors by code | {report['errors'] or 'none'} |",
        f"| verifier kills | {len(kills)} (sessions open on the victim: {[k['open_sessions_when_killed'] for k in kills]}) |",
        f"| resumes (in generations that finished) | {report['resumes']} |",
        f"| decoded without speculation | {report.get('plain_sessions', 0)} "
        f"(passes run ahead: {ahead.get('run', 0):.0f}, taken by their round: {ahead.get('taken', 0):.0f}) |",
        f"| greedy outputs checked against the reference | {report['greedy_checked']} |",
        f"| tokens lost / duplicated / different | {report['tokens_lost']} / {report['tokens_duplicated']} / {report['tokens_different']} |",
        f"| open sessions after the run | {report['after']} |",
        f"| RSS at the first -> last sample (5 s apart), MB | drafter {mb(first.get('drafter'))} -> {mb(last.get('drafter'))}, "
        f"verifier 0 {mb(first.get('verifier0'))} -> {mb(last.get('verifier0'))}, verifier 1 {mb(first.get('verifier1'))} -> {mb(last.get('verifier1'))} |",
        f"| RSS growth, MB per 1,000 sessions (least squares) | drafter {mb(growth['drafter'], True)}; {verifier_growth} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.render:
        report = json.loads(args.render.read_text())
        report.setdefault("stamp", args.render.stem.removeprefix("soak-"))
        report["memory_growth_mb_per_1000_sessions"] = memory_growth(report["rss_samples"])
        print(render(report))
        return 0
    logs = Path(tempfile.mkdtemp(prefix="specdec-soak-"))
    print(f"starting two verifiers and a drafter (logs in {logs}) ...", flush=True)
    soak = Soak(args, logs)
    try:
        soak.reference_outputs()
        threads = [threading.Thread(target=soak.client_loop, args=(i,), daemon=True) for i in range(args.clients)]
        threads.append(threading.Thread(target=soak.memory_loop, daemon=True))
        faults = threading.Thread(target=soak.fault_loop, daemon=True) if args.fault_seconds > 0 else None
        started = time.monotonic()
        for t in threads + ([faults] if faults else []):
            t.start()
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(5)
            print(f"{time.monotonic() - started:6.0f} s: {soak.sessions} sessions, {soak.served} served, "
                  f"{soak.cancelled} cancelled, errors {dict(soak.errors)}, resumes {soak.resumes}, kills {len(soak.kills)}", flush=True)
        soak.stop.set()
        for t in threads:
            t.join(timeout=300)
        if faults:
            faults.join(timeout=900)
        seconds = time.monotonic() - started
        time.sleep(2)
        for index in range(2):
            soak.count_ahead_passes(index)
        leftover = {"drafter": soak.drafter_open_sessions(), **{f"verifier{i}": Soak._open_sessions(v) for i, v in enumerate(soak.verifiers)}}
        path = write_report(soak, args, seconds, leftover)
        print(f"wrote {path}")
    finally:
        for service in [soak.drafter, *soak.verifiers]:
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGTERM)
        soak.shutdown()
    clean = soak.lost == soak.duplicated == soak.different == 0
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
