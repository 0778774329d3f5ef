"""A copy of the default tokenizer with two token ids swapped: valid, but not the same tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from specdec.model_files import tokenizer_dir


def write_altered_tokenizer(folder: Path) -> Path:
    for item in tokenizer_dir("default").iterdir():
        if item.is_file():
            (folder / item.name).write_bytes(item.read_bytes())
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["hello"], vocab["world"] = vocab["world"], vocab["hello"]
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder
