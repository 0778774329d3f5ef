"""specdec.progress: a step's output goes to its log, the terminal gets start and done lines, and
a failed step shows its log's tail."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specdec import progress

PROGRESS = Path(progress.__file__)


def _run_step(tmp_path: Path, body: str, keep_stdout: bool = False) -> subprocess.CompletedProcess[str]:
    """A process that runs `body` as a quiet step logging to tmp_path/step.log (a step redirects
    the process's own file descriptors, so it runs in a process of its own, as in the CLI)."""
    head = textwrap.dedent(f"""\
        import logging, os, subprocess, sys
        from pathlib import Path
        from specdec.progress import StepFailed, quiet_step
        try:
            with quiet_step("the step", Path({str(tmp_path / "step.log")!r}), keep_stdout={keep_stdout}):
    """)
    tail = "except StepFailed:\n    sys.exit(1)\nprint('after the step')\n"
    code = head + textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8) + tail
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_quiet_step_keeps_everything_it_prints_in_its_log(tmp_path: Path) -> None:
    run = _run_step(tmp_path, """
        print("a print")
        logging.getLogger("some.library").info("an INFO record")
        os.write(2, b"what a C extension writes\\n")
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('a child process')"], check=True)
    """)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "after the step\n"
    lines = run.stderr.splitlines()
    assert lines[0] == "the step ..." and lines[1].startswith("the step: done in ") and len(lines) == 2
    text = (tmp_path / "step.log").read_text()
    assert all(s in text for s in ("a print", "an INFO record", "what a C extension writes", "a child process"))


def test_a_failed_step_prints_its_logs_tail(tmp_path: Path) -> None:
    run = _run_step(tmp_path, """
        for i in range(100):
            print(f"line {i}")
        raise RuntimeError("the reason")
    """)
    assert run.returncode == 1 and not run.stdout
    lines = run.stderr.splitlines()
    assert lines[1].startswith("the step: FAILED in ")
    assert lines[2] == f"the step failed; the last lines of its log ({tmp_path / 'step.log'}):"
    assert "line 99" in lines and "line 10" not in lines  # the tail only
    assert lines[-1] == "RuntimeError: the reason"


def test_keep_stdout_leaves_the_steps_result_on_the_terminal(tmp_path: Path) -> None:
    run = _run_step(tmp_path, """
        print("/the/result")
        print("noise", file=sys.stderr)
    """, keep_stdout=True)
    assert run.stdout == "/the/result\nafter the step\n" and "noise" not in run.stderr


def test_the_command_line_runs_a_command_and_shows_its_log_only_when_it_fails(tmp_path: Path) -> None:
    def run(code: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(PROGRESS), "a step", str(tmp_path / "log"), "--", sys.executable, "-c", code]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})

    ok = run("print('pip noise')")
    assert ok.returncode == 0 and "pip noise" not in ok.stdout + ok.stderr
    assert ok.stderr.splitlines()[0] == "a step ..." and len(ok.stderr.splitlines()) == 2
    failed = run("import sys; print('why it failed'); sys.exit(3)")
    assert failed.returncode == 3 and "why it failed" in failed.stderr and "FAILED" in failed.stderr
