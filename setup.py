"""Generates the gRPC stubs from protos/ whenever the package is built or installed (also `pip install -e .`)."""

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        runpy.run_path(str(ROOT / "specdec" / "protogen.py"))["generate"](ROOT)
        super().run()


setup(cmdclass={"build_py": BuildPyWithStubs})
