"""The drafter (and the client, CLI and discovery) import nothing from torch or transformers:
its image installs neither (deploy/docker/drafter.Dockerfile)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ("torch", "transformers")


def test_drafter_imports_without_torch_or_transformers(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from specdec.model_files import tokenizer_dir

    folder = str(tokenizer_dir("default"))  # a prepared tokenizer folder, as baked into the image
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError("blocked in this test: " + name)

        sys.meta_path.insert(0, Block())
        import drafter_svc.server, drafter_svc.k8s_discovery, drafter_svc.verifier_pool, specdec.cli, specdec.client
        import drafter_svc.onnx_drafter, drafter_svc.draft_sampling, onnxruntime  # the model drafters
        drafter_svc.k8s_discovery.KubernetesDiscovery("ns", "svc")  # the kubernetes client is importable
        from specdec.model_files import tokenizer_dir
        from specdec.tokenizer import Tokenizer
        assert Tokenizer(tokenizer_dir({folder!r})).encode("Hello")  # the image's SPECDEC_DRAFTER_MODEL
        import kubernetes.client, kubernetes.watch
        try:
            specdec.cli.main(["serve", "drafter", "--help"])  # the image's entry point
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
    assert "--verifier-tls-ca-file" in run.stdout  # the help lists the settings the chart sets
