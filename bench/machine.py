"""A description of the machine and software a benchmark ran on, for its results file."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specdec.v1 import verifier_pb2


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit(repo: Path) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def describe() -> dict[str, object]:
    """CPU model, cores, load, OS, Python and library versions, and the repository commit."""
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "grpcio": _version("grpcio"),
        "llama_cpp_python": _version("llama_cpp_python"),
        "specdec": _version("specdec"),
        "git_commit": git_commit(Path(__file__).resolve().parents[1]),
    }


def verifier_info(address: str) -> verifier_pb2.ModelInfo:
    """The verifier at `address`'s ModelInfo (verifier.proto): its price, and `engine`, how it
    runs its passes once its start-up checks and tuning are done (a report must say what ran)."""
    import grpc

    from specdec.v1 import verifier_pb2, verifier_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        return verifier_pb2_grpc.VerifierStub(channel).GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=10)
