"""The gateway imports nothing from torch or transformers: it ships in the drafter image, which
installs neither (deploy/docker/drafter.Dockerfile)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("torch", "transformers")


def test_gateway_imports_without_torch_or_transformers() -> None:
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError("blocked in this test: " + name)

        sys.meta_path.insert(0, Block())
        import gateway_svc.server, specdec.cli
        try:
            specdec.cli.main(["serve", "openai", "--help"])  # the chart's command
        except SystemExit as done:
            assert done.code == 0, done.code
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
        assert not loaded, loaded
        print("torch-free")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("torch-free")
    assert "--drafter-tls-ca-file" in run.stdout and "--served-model-name" in run.stdout
