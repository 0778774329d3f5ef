"""`--cpus`: a CPU list parsed as Linux writes it, and services whose every thread stays on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.client import Client
from specdec.cpu_pinning import parse_cpu_list, pin_process
from specdec.launcher import LocalCluster, Service

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU pinning needs Linux")


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", {0}), ("3", {3}), ("0-3", {0, 1, 2, 3}), ("0,2-3", {0, 2, 3}), (" 1 , 5-6 ", {1, 5, 6}), ("2-2", {2}), ("1,1", {1})],
)
def test_cpu_lists_parse_as_linux_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", ",", "a", "-1", "1-", "3-1", "0,,1", "1.5", "0-2-4"])
def test_malformed_cpu_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_an_empty_list_pins_nothing() -> None:
    assert pin_process("  ") == 0


@linux_only
def test_a_cpu_the_process_may_not_use_is_refused_by_its_flag() -> None:
    with pytest.raises(SystemExit, match=r"--cpus: CPUs \[4095\] are not available"):
        pin_process("4095")
    with pytest.raises(SystemExit, match="--cpus: 'x' is not a CPU list"):
        pin_process("x")


@linux_only
def test_threads_started_before_and_after_pinning_stay_on_the_cpus() -> None:
    cpu = min(os.sched_getaffinity(0))
    code = (
        "import os, threading\n"
        "from specdec.cpu_pinning import pin_process\n"
        "seen = {}\n"
        "gate = threading.Event()\n"
        "def early(): gate.wait(); seen['early'] = os.sched_getaffinity(0)\n"
        "t = threading.Thread(target=early); t.start()\n"
        f"assert pin_process('{cpu}') == 1\n"
        "gate.set(); t.join()\n"
        "late = threading.Thread(target=lambda: seen.update(late=os.sched_getaffinity(0))); late.start(); late.join()\n"
        "print(sorted(seen['early']), sorted(seen['late']), sorted(os.sched_getaffinity(0)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == f"[{cpu}] [{cpu}] [{cpu}]"


def thread_cpus(pid: int) -> dict[int, set[int]]:
    """The CPUs each thread of a process may run on."""
    return {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@linux_only
def test_a_service_started_on_a_cpu_list_that_it_may_not_use_exits_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="--cpus: CPUs"):
        Service("drafter", ["--verifier", "127.0.0.1:1", "--drafter", "copy", "--cpus", "4095"], tmp_path / "drafter.log")


@linux_only
def test_a_core_each_every_thread_of_each_service_stays_on_its_own_and_generation_runs(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    verifier_cpu, drafter_cpu = cpus[0], cpus[-1]  # one CPU: both share it, still pinned
    with LocalCluster(
        tmp_path, verifier_args=[f"--cpus={verifier_cpu}", "--tune-pass-sizes=false"],
        drafter_args=[f"--cpus={drafter_cpu}", "--drafter", "copy", "--overlap", "on"],
    ) as cluster, Client(cluster.address) as client:
        result = client.generate(
            messages=[{"role": "user", "content": "Repeat after me: one two three four five six seven."}],
            max_new_tokens=24, temperature=0.0,
        )
        assert result.text == "One two three four five six seven." and result.stats.overlap
        for service, cpu in ((cluster.verifier, verifier_cpu), (cluster.drafter, drafter_cpu)):
            threads = thread_cpus(service.process.pid)
            assert len(threads) > 2 and all(allowed == {cpu} for allowed in threads.values()), (service.kind, threads)
    assert f"pinned to CPUs {verifier_cpu}; 1 torch threads" in (tmp_path / "verifier.log").read_text()
    assert f"pinned to CPUs {drafter_cpu}; 1 onnxruntime threads" in (tmp_path / "drafter.log").read_text()
