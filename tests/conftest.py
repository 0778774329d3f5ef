"""Fixtures shared by the suite: the real default model and real services on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specdec.launcher import LocalCluster, free_port
from specdec.metrics import scrape_metrics
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer(tokenizer_dir("default"))


@pytest.fixture(scope="session")
def reference_model():  # type: ignore[no-untyped-def]
    """The target as plain transformers sees it, in the test process (the ground truth)."""
    import torch
    from transformers import AutoModelForCausalLM

    from verifier_svc.model_loader import model_dir

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(model_dir("default")), dtype=torch.float32).eval()


def bfloat16_default_model(quantization: str = "none"):  # type: ignore[no-untyped-def]
    """The default model as transformers loads it in bfloat16, its linear layers quantized as the
    verifier's --quantization serves them: the reference of the bfloat16 tests."""
    import torch
    from transformers import AutoModelForCausalLM

    from verifier_svc.int8_weights import quantize_linear_layers
    from verifier_svc.model_loader import model_dir

    model = AutoModelForCausalLM.from_pretrained(str(model_dir("default")), dtype=torch.bfloat16).eval()
    if quantization == "int8":
        quantize_linear_layers(model)
    return model


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A verifier and a drafter as separate processes, shared by the integration tests.

    The verifier's tree limits (16 nodes, depth 8) and the drafter's max_new_tokens cap are set
    low so that the limit checks can be exercised cheaply. The default drafter is named (copy):
    `auto` would pick onnx-quantized whenever an earlier test had built it.
    """
    with services(tmp_path_factory.mktemp("cluster-logs")) as c:
        yield c


# Sessions the integration tests' verifier admits: room for test_greedy_identity's 8 at once and
# the sessions of its previous requests still closing.
CLUSTER_SESSIONS = 12


def services(logs: Path, *verifier_args: str, drafter_args: tuple[str, ...] = ()) -> LocalCluster:
    """The integration tests' services (see `cluster`), with extra verifier (and drafter) flags;
    the verifier serves its metrics (verifier_metrics)."""
    return LocalCluster(
        logs,
        verifier_args=["--max-draft-tokens", "16", "--max-draft-depth", "8", "--max-sessions", str(CLUSTER_SESSIONS), "--metrics-port", str(free_port()), *verifier_args],
        drafter_args=["--max-new-tokens-cap", "512", "--drafter", "copy", *drafter_args],
    )


@pytest.fixture(scope="session")
def onnx_quantized_dir() -> Path:
    """The real `quantized` ONNX drafter (`specdec draft build quantized`), built once into the
    drafter cache (like the model cache: CI pays it once); the drafter services find it there."""
    import time

    from drafter_build.build import build

    started = time.perf_counter()
    folder = build("quantized")
    print(f"\nquantized drafter ready in {time.perf_counter() - started:.1f} s: {folder}")
    return folder


@pytest.fixture(scope="session")
def matrix_model_folder(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """name -> the folder of tests/model_matrix.py's tiny model of that architecture, saved
    (with the default tokenizer's files) once per session, on first use."""
    from tests.model_matrix import save_model

    root = tmp_path_factory.mktemp("model-matrix")
    folders: dict[str, Path] = {}

    def folder(name: str) -> Path:
        if name not in folders:
            folders[name] = save_model(name, root / name)
        return folders[name]

    return folder


def verifier_metrics(cluster: LocalCluster) -> dict[str, float]:
    """The verifier's /metrics (scrape_metrics) of a cluster from `services`."""
    args = cluster.verifier.process.args
    return scrape_metrics(int(args[args.index("--metrics-port") + 1]))
