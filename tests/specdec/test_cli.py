"""The `specdec` command's process-wide settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Threads of a process that imports the command and then numpy, as a served process does.
COUNT_THREADS = "import specdec.cli, numpy, os; print(len(os.listdir('/proc/self/task')))"


def _threads_after_import(**env: str) -> int:
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", COUNT_THREADS], env={**base, **env}, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not os.path.isdir("/proc/self/task"), reason="needs 2 cores and /proc")
def test_numpy_starts_no_blas_worker_threads_unless_asked() -> None:
    # No worker to spin beside the other service's passes (specdec/cli.py); a user's own
    # setting wins, which also shows the count sees BLAS workers when there are some.
    assert _threads_after_import() == 1
    assert _threads_after_import(OPENBLAS_NUM_THREADS="2") == 2
