"""Where the services spend a round outside the target's pass: py-spy samples of a real verifier
and drafter on loopback during greedy plain decoding (one session, no drafts), per process the
functions that hold the most samples by themselves, and the project's functions (verifier_svc,
drafter_svc, specdec) with what they call.

    python -m bench.services_profile [--model M] [--device cuda] [--dtype bfloat16] [--seconds 20]

py-spy (a sampling profiler of running Python processes, `pip install py-spy`; not a project
dependency) must be on PATH or beside this interpreter. A thread's samples count while it runs
Python or waits for the GIL, not while it sleeps in a system call, so the scheduler thread's share
is the verifier's serial work a round: the pass, acceptance, pricing, resolving the verdict.
Measurements of the tokens decoded go to stderr; the report, to stdout.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from specdec.client import Client
from specdec.launcher import LocalCluster
from specdec.model_files import DEFAULT_MODEL

PROJECT = ("verifier_svc/", "drafter_svc/", "specdec/")  # whose functions are listed with what they call
PROMPT = "Once upon a time, in a lighthouse on a rocky island far from the coast, there lived an old keeper who"
RATE = 500  # samples a second


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seconds", type=float, default=20.0, help="how long each process is sampled")
    p.add_argument("--top", type=int, default=25, help="functions listed per process and kind")
    p.add_argument("--keep", type=Path, default=None, help="keep py-spy's raw samples in this folder")
    return p.parse_args(argv)


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        sys.exit("services_profile: py-spy not found (pip install py-spy)")
    return found


def frame_name(frame: str) -> str:
    """`function (file.py:line)` as `function (package/file.py)`."""
    match = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if not match:
        return frame
    path = match.group(2).split("site-packages/")[-1]
    return f"{match.group(1)} ({'/'.join(Path(path).parts[-2:])})"


def summary(raw: Path, top: int) -> list[str]:
    """A markdown section from py-spy's raw output (`thread;frame;...;frame count` lines)."""
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        samples = int(count)
        total += samples
        threads[re.sub(r"\(\d+\)", "", frames[0])] += samples
        names = [frame_name(f) for f in frames[1:]]
        if names:
            own[names[-1]] += samples
        for name in set(names):
            if name.split(" (")[-1].startswith(PROJECT):
                within[name] += samples
    lines = [f"{total} samples at {RATE}/s; by thread: " + ", ".join(f"{t} {n}" for t, n in threads.most_common())]
    for title, counts in (("by themselves", own), ("the project's, with what they call", within)):
        lines += ["", f"| share of samples | function ({title}) |", "|---|---|"]
        lines += [f"| {100 * n / max(1, total):.1f}% | `{name}` |" for name, n in counts.most_common(top)]
    return lines


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spy = py_spy()
    verifier_args = ["--model", args.model, "--device", args.device, "--dtype", args.dtype]
    with tempfile.TemporaryDirectory() as work, LocalCluster(Path(work), verifier_args=verifier_args, drafter_args=["--drafter", "copy"]) as cluster:
        raw = {s.kind: Path(work) / f"{s.kind}.txt" for s in (cluster.verifier, cluster.drafter)}
        with Client(cluster.address) as client:
            client.generate(PROMPT, max_new_tokens=8, num_draft_tokens=0, temperature=0.0)  # warm-up
            spies = [
                subprocess.Popen(
                    [spy, "record", "--pid", str(s.process.pid), "--duration", str(int(args.seconds)), "--rate", str(RATE),
                     "--format", "raw", "--threads", "--nonblocking", "-o", str(raw[s.kind])],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                for s in (cluster.verifier, cluster.drafter)
            ]
            tokens, began = 0, time.perf_counter()
            while time.perf_counter() - began < args.seconds + 1:
                tokens += client.generate(PROMPT, max_new_tokens=128, num_draft_tokens=0, temperature=0.0).stats.generated_tokens
            elapsed = time.perf_counter() - began
            for process in spies:
                process.wait()
        print(f"{tokens} tokens in {elapsed:.1f} s: {1000 * elapsed / max(1, tokens):.2f} ms/token", file=sys.stderr)
        report = [f"# Services profile: {args.model} on {args.device} ({args.dtype}), greedy plain decoding", "",
                  f"{1000 * elapsed / max(1, tokens):.2f} ms/token over {tokens} tokens while sampled."]
        for kind, path in raw.items():
            report += ["", f"## {kind}", ""] + summary(path, args.top)
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, args.keep / path.name)
    print("\n".join(report))


if __name__ == "__main__":
    main()
