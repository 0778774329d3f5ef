"""Pins a service's process to some CPUs (`--cpus`), so that on one machine the drafter and the
verifier can each have cores of their own, as separate pods have (what that gains and costs:
docs/design/overlap-off-on-shared-cores.md).

Linux only (`os.sched_setaffinity`); elsewhere a non-empty list is refused at start.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a Linux CPU list (`taskset -c`, `cpuset.cpus`): "0", "0-3", "0,2-3".

    ValueError for anything else, including a descending range or an empty list."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list such as 0, 0-3 or 0,2-3")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"{part.strip()!r}: a range must not descend")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def pin_process(cpu_list: str, flag: str = "--cpus") -> int:
    """Restrict every thread of this process, and so every thread it starts later, to the CPUs
    of cpu_list; returns how many. An empty list pins nothing and returns 0.

    SystemExit naming `flag` for a malformed list, or CPUs this process may not run on."""
    if not cpu_list.strip():
        return 0
    try:
        cpus = parse_cpu_list(cpu_list)
    except ValueError as error:
        raise SystemExit(f"{flag}: {error}") from None
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit(f"{flag}: pinning to CPUs needs Linux (os.sched_setaffinity)")
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
        raise SystemExit(
            f"{flag}: CPUs {sorted(cpus - allowed)} are not available to this process (it may use {_cpu_list_text(allowed)})"
        )
    for thread_id in _thread_ids():
        try:
            os.sched_setaffinity(thread_id, cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return len(cpus)


def pin_and_size_pool(cpu_list: str, threads: int, pool: str) -> int:
    """Pin the process (pin_process) and return the size its thread pool should have: `threads`
    if set, else one per pinned CPU (the libraries count the machine's cores when loaded, before
    pinning), else 0 (the library's default). Call it before any pool or server thread starts."""
    pinned = pin_process(cpu_list)
    if pinned:
        threads = threads or pinned
        log.info("pinned to CPUs %s; %d %s threads", cpu_list, threads, pool)
    return threads


def _thread_ids() -> list[int]:
    """This process's threads (a new thread inherits its creator's CPUs, not the process's)."""
    try:
        return [int(name) for name in os.listdir(Path("/proc/self/task"))]
    except OSError:
        return [0]  # the calling thread


def _cpu_list_text(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
