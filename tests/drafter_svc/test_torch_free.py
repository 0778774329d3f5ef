"""The drafter (and the client, CLI and discovery) import nothing from torch or transformers,
and installing the package without extras, or with the drafter's, installs neither: the drafter's
image (deploy/docker/drafter.Dockerfile) installs `specdec[drafter]`."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from specdec.extras import EXTRA_MODULES

BLOCKED = ("torch", "transformers")


def run_without_torch(body: str) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    """Runs `body` (Python, dedented) in a fresh interpreter where importing torch or transformers
    fails; asserts it exits 0 having loaded neither. Returns the run (its stdout ends "torch-free")."""
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {BLOCKED!r}:
                    raise ImportError("blocked in this test: " + name)

        sys.meta_path.insert(0, Block())
        """
    ) + textwrap.dedent(body) + textwrap.dedent(
        f"""
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
        assert not loaded, loaded
        print("torch-free")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("torch-free")
    return run
MODEL_STACK = {"torch", "transformers", "safetensors", "gguf", "accelerate"}
PROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(extras: tuple[str, ...]) -> set[str]:
    """The distributions pyproject.toml names for `pip install specdec[extras]`, its own
    `specdec[...]` references followed."""
    names: set[str] = set()
    todo = [Requirement(r) for r in PROJECT["dependencies"]]
    todo += [Requirement(r) for extra in extras for r in PROJECT["optional-dependencies"][extra]]
    while todo:
        requirement = todo.pop()
        if _normal(requirement.name) == "specdec":
            todo += [Requirement(r) for extra in requirement.extras for r in PROJECT["optional-dependencies"][extra]]
        else:
            names.add(_normal(requirement.name))
    return names


def installed(extras: tuple[str, ...]) -> set[str]:
    """What pip installs for `specdec[extras]`: declared(extras) and, transitively, what each of
    those distributions requires (their own extras left out), as installed here."""
    seen: set[str] = set()
    todo = sorted(declared(extras))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(_normal(requirement.name))
    return seen


@pytest.mark.parametrize("extras", [(), ("drafter",)], ids=["client", "drafter"])
def test_client_and_drafter_installs_hold_no_model_stack(extras: tuple[str, ...]) -> None:
    everything = installed(extras)
    assert not everything & (MODEL_STACK | {"torch", "transformers"}), sorted(everything & MODEL_STACK)
    if not extras:  # the client: gRPC and protobuf, nothing of the services
        assert declared(()) == {"grpcio", "grpcio-health-checking", "protobuf"}
        assert not {n for n in everything if "onnx" in n or n in ("numpy", "tokenizers", "kubernetes")}
    assert MODEL_STACK <= installed(("verifier",))


def test_each_commands_extra_check_names_the_extras_modules() -> None:
    """specdec.extras.EXTRA_MODULES (what the CLI checks before a server command) is pyproject's
    extras as import names: every distribution of an extra provides one of its modules, and
    every module comes from one of its distributions."""
    provides: dict[str, set[str]] = {}
    for module, names in importlib.metadata.packages_distributions().items():
        for name in names:
            provides.setdefault(_normal(name), set()).add(module)
    for extra, modules in EXTRA_MODULES.items():
        names = declared((extra,)) - declared(())
        assert all(provides.get(n, set()) & set(modules) for n in names), (extra, sorted(names))
        assert set(modules) <= set().union(*(provides.get(n, set()) for n in names)), extra


def test_drafter_imports_without_torch_or_transformers(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from specdec.model_files import tokenizer_dir

    folder = str(tokenizer_dir("default"))  # a prepared tokenizer folder, as baked into the image
    run = run_without_torch(
        f"""
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
        assert specdec.cli.main(["serve", "verifier", "--port", "0"]) == 2  # one line naming the extra
        """
    )
    assert "--verifier-tls-ca-file" in run.stdout  # the help lists the settings the chart sets
    assert run.stderr.strip().splitlines()[-1] == (
        "specdec serve verifier needs the verifier extra (torch, transformers not installed): pip install 'specdec[verifier]'"
    )
