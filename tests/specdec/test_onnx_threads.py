"""The onnxruntime sessions' threads (specdec/onnx_threads.py): the drafters' models and the
verifier's CPU passes spin within a call and stop when it returns, leaving the cores to the other
service between calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drafter_svc.draft_model import DraftModel
from tests.drafter_build.tiny_model import tiny_drafter_folder
from verifier_svc.backends.onnx_passes import OnnxPasses
from verifier_svc.model_loader import load_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def drafter_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_drafter_folder(tmp_path_factory.mktemp("tiny-drafter"))[1]


def spins_only_within_a_call(session) -> bool:  # type: ignore[no-untyped-def]
    options = session.get_session_options()
    return (options.get_session_config_entry("session.intra_op.allow_spinning"),
            options.get_session_config_entry("session.force_spinning_stop")) == ("1", "1")


def test_the_drafters_and_the_verifiers_sessions_spin_only_within_a_call(drafter_folder, matrix_model_folder, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert spins_only_within_a_call(DraftModel(drafter_folder, threads=2)._session)
    model = load_model(matrix_model_folder("llama"), "cpu", torch.float32)
    made = OnnxPasses(model, 2, tmp_path)
    kept = OnnxPasses(model, 2, tmp_path)  # the optimized step read back from the store
    assert spins_only_within_a_call(made.session) and spins_only_within_a_call(kept.session)


def test_a_drafters_threads_use_no_cpu_between_calls(drafter_folder) -> None:  # type: ignore[no-untyped-def]
    """In a process of its own, after a two-thread call: onnxruntime's workers left spinning burn
    ~30 ms of CPU after each call on this host; stopped, none."""
    script = f"""
import time
from pathlib import Path
from drafter_svc.draft_model import DraftModel, causal_bias
model = DraftModel(Path({str(drafter_folder)!r}), threads=2)
for _ in range(3):
    model.run([5, 6, 7], [0, 1, 2], causal_bias(0, 3), model.empty_cache())
began = time.process_time()
time.sleep(0.3)
print(time.process_time() - began)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    idle_cpu = float(done.stdout.split()[-1])
    assert idle_cpu < 0.01, f"the drafter's process used {idle_cpu * 1000:.1f} ms of CPU in the 0.3 s after a call"
