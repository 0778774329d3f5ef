"""Starts the two services as separate local processes on loopback (demo, tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from specdec.grpc_server import LISTENING_PREFIX


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago (for servers that take no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """One `specdec serve KIND --port 0` process; its log goes to log_path."""

    def __init__(
        self, kind: str, args: Sequence[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.kind = kind
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specdec.cli", "serve", kind, "--host", "127.0.0.1", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith(LISTENING_PREFIX):
            self.stop()
            raise RuntimeError(f"{kind} did not start; see {log_path}:\n{log_path.read_text()[-2000:]}")
        self.port = int(line.split()[1])
        self.address = f"127.0.0.1:{self.port}"

    def wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.kind} exited; see {self.log_path}:\n{self.log_path.read_text()[-2000:]}")
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        raise TimeoutError(f"{self.kind} not serving after {timeout:.0f} s; see {self.log_path}:\n{self.log_path.read_text()[-2000:]}")

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds the process has used so far, all threads (Linux /proc; else None)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then SIGKILL after timeout; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


class LocalCluster:
    """A verifier and a drafter on loopback: `with LocalCluster(log_dir) as c: Client(c.address)`."""

    def __init__(
        self, log_dir: Path, verifier_args: Sequence[str] = (), drafter_args: Sequence[str] = (), timeout: float = 600,
        checkout: Path | None = None,
    ) -> None:
        """checkout: serve that folder's code (a second checkout, for A/B runs) instead of the imported one."""
        log_dir.mkdir(parents=True, exist_ok=True)
        env = {"PYTHONPATH": str(checkout.resolve())} if checkout else None
        cwd = checkout.resolve() if checkout else None  # `python -m` puts the working folder first on sys.path
        self.verifier = Service("verifier", verifier_args, log_dir / "verifier.log", env, cwd)
        try:
            self.drafter = Service(
                "drafter", ["--verifier", self.verifier.address, *drafter_args], log_dir / "drafter.log", env, cwd
            )
            self.verifier.wait_serving(timeout)
            self.drafter.wait_serving(timeout)
        except BaseException:
            self.stop()
            raise
        self.address = self.drafter.address

    def stop(self) -> None:
        for service in (getattr(self, "drafter", None), self.verifier):
            if service is not None:
                service.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
