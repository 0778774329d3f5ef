"""Run a long step quietly: one line of progress on the terminal, everything the step prints in a
log file, and that log's tail only when the step fails.

On a TTY the line is a spinner with the elapsed time, replaced by a done line; elsewhere (CI, a
pipe) a start line and a done line with the duration. Standard library only: ./run.sh runs this
file by path with the system Python to install the virtualenv (`python3 specdec/progress.py
LABEL LOG -- COMMAND...`), before any dependency exists.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

TAIL_LINES = 40  # of a failed step's log
_SPINNER = "|/-\\"


class StepFailed(Exception):
    """A step failed; its log's tail is already printed. `code`: the exit status to end with."""

    def __init__(self, label: str, code: int = 1) -> None:
        super().__init__(label)
        self.code = code


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' if it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 256 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class _Line:
    """The progress line of one step, written to `out`: a spinner thread on a TTY."""

    def __init__(self, label: str, out: IO[str]) -> None:
        self.label = label
        self.out = out
        self.tty = out.isatty()
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.tty:
            self._write(f"{self.label} ...\n")
            return
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        turn = 0
        while not self._stop.wait(0.1 if turn else 0):
            self._write(f"\r{_SPINNER[turn % len(_SPINNER)]} {self.label}  {self.elapsed():.0f} s\033[K")
            turn += 1

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def finish(self, ok: bool) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        word = "done" if ok else "FAILED"
        prefix = "\r\033[K" if self.tty else ""
        self._write(f"{prefix}{self.label}: {word} in {self.elapsed():.1f} s\n")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away; the step itself goes on
            pass


def _report_failure(label: str, log_path: Path | None, out: IO[str]) -> None:
    if log_path is None:
        return
    tail = log_tail(log_path)
    out.write(f"{label} failed; the last lines of its log ({log_path}):\n{tail}\n" if tail else f"{label} failed; log: {log_path}\n")
    out.flush()


@contextlib.contextmanager
def quiet_step(label: str, log_path: Path | None = None, verbose: bool = False, keep_stdout: bool = False) -> Iterator[None]:
    """Run the body as one step. While it runs, file descriptors 2 and (unless keep_stdout, for a
    step whose result is its stdout) 1 point at log_path, so Python's prints, logging (at INFO),
    warnings, C extensions and child processes all write there; the terminal shows the progress
    line. An exception in the body goes to the log with its traceback, the log's tail is
    printed, and StepFailed is raised. log_path None, or verbose: nothing is redirected, only the
    progress lines are added, and exceptions pass unchanged."""
    terminal = os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace")
    line = _Line(label, terminal)
    log = None if verbose else log_path
    saved: list[tuple[int, int]] = []
    root = logging.getLogger()
    level = root.level
    try:
        if log is not None:
            saved = _redirect(log, (2,) if keep_stdout else (1, 2))
            if not root.handlers:
                logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
            root.setLevel(logging.INFO)
        line.start()
        try:
            yield
        except BaseException as error:
            failed = isinstance(error, Exception) or (isinstance(error, SystemExit) and error.code not in (0, None))
            if log is not None and isinstance(error, Exception):
                traceback.print_exc()  # into the log
            saved = _restore(saved)
            line.finish(ok=not failed)
            if log is not None and failed:
                _report_failure(label, log, terminal)
            if log is None or not isinstance(error, Exception):
                raise
            raise StepFailed(label) from error
        saved = _restore(saved)
        line.finish(ok=True)
    finally:
        _restore(saved)
        root.setLevel(level)
        terminal.close()


def _redirect(log_path: Path, fds: Sequence[int]) -> list[tuple[int, int]]:
    """Point these fds at the end of log_path; returns (fd, copy of what it was) pairs."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = []
    with log_path.open("ab") as log:
        for fd in fds:
            saved.append((fd, os.dup(fd)))
            os.dup2(log.fileno(), fd)
    return saved


def _restore(saved: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Point the fds back at the copies `_redirect` returned (none: nothing to do); returns []."""
    if saved:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
    return []


def run_command(label: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """Run argv as one step with its output in log_path; its exit status (the log's tail is
    printed when it is not 0)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    line = _Line(label, sys.stderr)
    with log_path.open("wb") as log:
        line.start()
        try:
            code = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  env=None if env is None else {**os.environ, **env}).returncode
        except OSError as error:
            log.write(f"{error}\n".encode())
            code = 127
    line.finish(ok=code == 0)
    if code != 0:
        _report_failure(label, log_path, sys.stderr)
    return code


def main(argv: Sequence[str]) -> int:
    """`python3 specdec/progress.py LABEL LOG -- COMMAND...`: run_command from a shell script."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: progress.py LABEL LOG -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run_command(argv[0], argv[3:], Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
