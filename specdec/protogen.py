"""Builds specdec/v1/*_pb2*.py from protos/specdec/v1/*.proto with grpcio-tools.

Run at install time by setup.py; `python specdec/protogen.py` regenerates by hand
(by path, not `-m`: importing the specdec package needs the stubs this makes).
Depends only on the standard library and grpc_tools so setup.py can run it before install.
"""

from __future__ import annotations

import sys
from pathlib import Path


def generate(root: Path) -> list[Path]:
    """Compile every proto under root/protos into root (package specdec.v1); return the protos."""
    from grpc_tools import protoc  # imported here: only needed at build time
    import grpc_tools

    proto_root = root / "protos"
    protos = sorted(proto_root.glob("specdec/v1/*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={root}",
        f"--pyi_out={root}",
        f"--grpc_python_out={root}",
        *map(str, protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {[p.name for p in protos]}")
    return protos


if __name__ == "__main__":
    generate(Path(__file__).resolve().parent.parent)
    sys.exit(0)
