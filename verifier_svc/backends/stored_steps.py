"""Compiled layer groups kept on disk: a verifier with compiled CPU passes starts by loading the
code an earlier start compiled instead of compiling it again.

torch.compile re-traces a function with dynamo at every start, and for SmolLM2-135M's six
compiles that took 40-135 s even when inductor's own caches held the generated code
(docs/design/cpu-engine.md). `torch.compile(...).aot_compile(example)` compiles a function for
one example's class of shapes ahead of a call; `save_compiled_function` writes the result, with
its guards (the shapes, dtypes and module attributes it was traced under), and
`torch.compiler.load_compiled_function` reads it back without tracing: a fraction of a second.

`StoredSteps` is compiled_layers.group_step so compiled and stored: a call runs the first stored
compile whose guards accept its arguments (the last one used is tried first), and a call none
accepts compiles one more and writes it to the store. A store's folder is named by everything a
compile's code depends on that its guards do not check: torch's, transformers' and Python's
versions, the CPU's instruction set as torch sees it, the model's config and dtype, and the
verifier's own source. A file that no longer loads is reported and removed; the shapes it took are
compiled again at their next call unless another stored compile takes them.
Files are pickles: the store must be a folder only this service writes. A store that cannot be
written (a read-only file system) is reported once, and compiles then stay in this process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
import transformers

from specdec.model_files import cache_root
from verifier_svc.backends.compiled_layers import group_step

log = logging.getLogger(__name__)

# The package whose source a stored compile was traced from (any change there recompiles).
SOURCE_ROOT = Path(__file__).resolve().parents[1]


def default_store() -> Path:
    """compiled-passes in specdec's cache folder (SPECDEC_CACHE_DIR, else ~/.cache/specdec)."""
    return cache_root() / "compiled-passes"


def store_folder(setting: str) -> Path | None:
    """The store --cpu-compiled-pass-store names: "" the default one, "off" none."""
    if setting == "off":
        return None
    return Path(setting).expanduser() if setting else default_store()


def source_digest(root: Path = SOURCE_ROOT) -> str:
    """A digest of every Python file under `root`, in path order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def store_key(model: torch.nn.Module, extra: dict[str, Any]) -> str:
    """The name of the folder holding this model's compiles: what their code depends on besides
    what their guards check, plus `extra` (the backend's own choices)."""
    parameter = next(model.parameters())
    parts = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version,
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "config": model.config.to_json_string(use_diff=False),
        "dtype": str(parameter.dtype),
        "source": source_digest(),
        **extra,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


class StoredSteps:
    """group_step compiled ahead of time for each class of shapes it is called with, each
    compile kept in `folder` (None: in this process only)."""

    made = 0  # compiles made by every StoredSteps of this process

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.steps: list[Any] = []  # torch._dynamo.aot_compile.AOTCompiledFunction, last used first
        self.compiled = 0  # compiles made by this object
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                self._unwritable(error)
                return
            for path in sorted(folder.glob("*.bin")):
                self._load(path)

    def _unwritable(self, error: OSError) -> None:
        log.warning("compiled passes are not kept: the store %s cannot be written (%s)", self.folder, error)
        self.folder = None

    @property
    def loaded(self) -> int:
        """Compiles read from the store when made."""
        return len(self.steps) - self.compiled

    def _load(self, path: Path) -> None:
        try:
            with path.open("rb") as file:
                step = torch.compiler.load_compiled_function(file, f_globals=group_step.__globals__)
        except Exception as error:  # noqa: BLE001 - any unreadable file is dropped
            log.warning("removing compiled pass %s, which no longer loads: %s", path, str(error).splitlines()[0] if str(error) else type(error).__name__)
            path.unlink(missing_ok=True)
            return
        step.disable_guard_check()  # __call__ checks once, choosing among the steps
        self.steps.append(step)

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Floats (a layer's scaling, a norm's epsilon) as the constants they are: compiled as
        # symbols, dynamo restarts its analysis, which an ahead-of-time compile does not do.
        with torch._dynamo.config.patch(specialize_float=True):
            step = torch.compile(group_step, dynamic=True, fullgraph=True).aot_compile((args, kwargs))
        self.compiled += 1
        StoredSteps.made += 1
        if self.folder is not None:
            try:
                step.save_compiled_function(str(self.folder / f"{uuid.uuid4().hex}.bin"))
            except OSError as error:
                self._unwritable(error)
        step.disable_guard_check()
        return step

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        for index, step in enumerate(self.steps):
            if step.guard_check(*args, **kwargs):
                if index:
                    self.steps.insert(0, self.steps.pop(index))
                return step(*args, **kwargs)
        step = self._compile(args, kwargs)
        self.steps.insert(0, step)
        return step(*args, **kwargs)

