"""Probe (2026-11-29): a verifier's start beside a serving one (two clients, greedy, 32 new
tokens) on the same 2 cores, torch's OpenMP threads in the starting verifier spinning as libgomp
does by default or as `modes` sets them, in turns: seconds from spawn to serving, and the
requests the serving verifier finished meanwhile. The first run compared OMP_WAIT_POLICY=PASSIVE,
the second GOMP_SPINCOUNT=10000 (as below). Both ran at commit c6a2469, before the command set
GOMP_SPINCOUNT=10000 for every process it starts (so the serving verifier then spun as libgomp's
default; now it spins 10,000 rounds unless this probe's environment says otherwise).

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/openmp_restart_probe.py 2
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from specdec.client import Client
from specdec.launcher import Service

PROMPTS = ["Write a short poem about the sea.", "Explain what a hash table is in two sentences.", "List three uses of copper."]


def main() -> None:
    logs = Path(tempfile.mkdtemp(prefix="restart-probe-"))
    serving = Service("verifier", ["--max-sessions", "16"], logs / "a.log")
    serving.wait_serving(900)
    drafter = Service("drafter", ["--verifier", serving.address], logs / "d.log")
    drafter.wait_serving(900)
    stop = threading.Event()
    served = [0]

    def client_loop() -> None:
        with Client(drafter.address, timeout=300) as client:
            i = 0
            while not stop.is_set():
                client.generate(messages=[{"role": "user", "content": PROMPTS[i % 3]}], max_new_tokens=32, temperature=0.0)
                served[0] += 1
                i += 1

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(10)
    # As run: {"spinning (default)": {}, ...}, before the command set GOMP_SPINCOUNT itself
    # (specdec/cli.py); libgomp's default is 300,000, so this reproduces it now.
    modes = {"spinning (default)": {"GOMP_SPINCOUNT": "300000"}, "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"}}
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    for turn in range(turns):
        for name, env in (modes.items() if turn % 2 == 0 else list(modes.items())[::-1]):
            before, began = served[0], time.monotonic()
            starting = Service("verifier", ["--max-sessions", "16"], logs / f"b-{turn}-{len(env)}.log", env=env)
            starting.wait_serving(900)
            seconds = time.monotonic() - began
            print(f"{name}: serving after {seconds:.1f} s; the serving verifier served {served[0] - before} requests meanwhile "
                  f"({(served[0] - before) / seconds:.2f}/s)", flush=True)
            starting.stop()
            time.sleep(5)
    quiet_before, quiet_began = served[0], time.monotonic()
    time.sleep(20)
    print(f"alone: {(served[0] - quiet_before) / (time.monotonic() - quiet_began):.2f} requests/s", flush=True)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    drafter.stop()
    serving.stop()


if __name__ == "__main__":
    main()
