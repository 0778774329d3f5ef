"""The `specdec` command's process-wide settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Threads of a process that imports the command and then numpy, as a served process does.
COUNT_THREADS = "import specdec.cli, numpy, os; print(len(os.listdir('/proc/self/task')))"


def _printed(script: str, cleared: tuple[str, ...], **env: str) -> str:
    """What `script` prints in a fresh interpreter whose environment is this one's without
    `cleared`, plus `env`."""
    base = {k: v for k, v in os.environ.items() if k not in cleared}
    return subprocess.run([sys.executable, "-c", script], env={**base, **env}, capture_output=True, text=True, check=True).stdout.strip()


def _threads_after_import(**env: str) -> int:
    return int(_printed(COUNT_THREADS, ("OPENBLAS_NUM_THREADS",), **env))


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not os.path.isdir("/proc/self/task"), reason="needs 2 cores and /proc")
def test_numpy_starts_no_blas_worker_threads_unless_asked() -> None:
    # No worker to spin beside the other service's passes (specdec/cli.py); a user's own
    # setting wins, which also shows the count sees BLAS workers when there are some.
    assert _threads_after_import() == 1
    assert _threads_after_import(OPENBLAS_NUM_THREADS="2") == 2


def _spin_count_after_import(**env: str) -> str:
    script = "import sys, os, specdec.cli; print('torch' in sys.modules, os.environ.get('GOMP_SPINCOUNT'))"
    return _printed(script, ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"), **env)


def test_torch_spins_briefly_unless_asked_otherwise() -> None:
    # Set before torch loads (libgomp reads it then): the command imports no torch itself.
    assert _spin_count_after_import() == "False 10000"
    assert _spin_count_after_import(GOMP_SPINCOUNT="5") == "False 5"
    assert _spin_count_after_import(OMP_WAIT_POLICY="ACTIVE") == "False None"


def test_help_lists_each_command_on_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from specdec.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    for command in ("serve", "generate", "health", "demo", "bench", "bench-lossy", "bench-drafter", "draft"):
        (line,) = [line for line in lines if line.split()[:1] == [command]]
        after = lines[lines.index(line) + 1]
        assert len(line.split()) > 2 and not after.startswith(" " * 8), (line, after)  # help beside it, not wrapped


def test_a_command_without_its_extra_says_which_to_install(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from specdec import cli, extras

    monkeypatch.setattr(extras, "importable", lambda module: module not in ("onnxruntime", "torch"))
    assert cli.main(["serve", "drafter"]) == 2
    assert cli.main(["demo", "--no-build"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "specdec serve drafter needs the drafter extra (onnxruntime not installed): pip install 'specdec[drafter]'",
        "specdec demo --no-build needs the drafter and verifier extras (onnxruntime, torch not installed): "
        "pip install 'specdec[drafter,verifier]'",
    ]
