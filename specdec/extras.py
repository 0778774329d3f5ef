"""Which optional parts of the package (pyproject's extras) a command needs, and a check that they
are installed, so that a client-only install (`pip install specdec`) answers a server command with
one line naming the extra instead of an ImportError traceback."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence

# The top-level modules each extra's distributions provide (tests/drafter_svc/test_torch_free.py
# checks these against pyproject.toml, so neither can drift from the other).
SERVE_MODULES: tuple[str, ...] = ("grpc_reflection", "prometheus_client", "numpy", "tokenizers", "jinja2", "llguidance")
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "serve": SERVE_MODULES,
    "drafter": (*SERVE_MODULES, "kubernetes", "onnxruntime"),
    "gateway": (*SERVE_MODULES, "kubernetes", "fastapi", "uvicorn"),
    "verifier": (*SERVE_MODULES, "torch", "transformers", "safetensors", "gguf", "accelerate", "onnxruntime", "onnx"),
    "build-drafter": (*SERVE_MODULES, "kubernetes", "onnxruntime", "torch", "transformers", "safetensors", "gguf",
                      "accelerate", "onnx", "onnxscript"),
}
EXTRA_MODULES["all"] = (*EXTRA_MODULES["build-drafter"], "fastapi", "uvicorn", "matplotlib")


def missing_modules(extras: Iterable[str]) -> list[str]:
    """The modules of these extras that cannot be imported here, in the table's order."""
    wanted = dict.fromkeys(m for extra in extras for m in EXTRA_MODULES[extra])
    return [m for m in wanted if not importable(m)]


def importable(module: str) -> bool:
    """Whether `module` can be imported here (a half-installed package counts as not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder refused it, or a half-installed package
        return False


def needs_extras_message(command: str, extras: Sequence[str]) -> str | None:
    """One line telling how to install what `command` lacks; None when nothing is missing."""
    missing = missing_modules(extras)
    if not missing:
        return None
    names = " and ".join(extras)
    noun = "extra" if len(extras) == 1 else "extras"
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"{command} needs the {names} {noun} ({shown} not installed): pip install 'specdec[{','.join(extras)}]'"
