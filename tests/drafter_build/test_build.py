"""`specdec draft build` from transformers folders of other architectures than the target's: the
generic export's logits match torch within the check's tolerance and the drafter service drafts
from them with the q torch gives; a broken export fails the build with the measured difference;
the service refuses a failed, unchecked or foreign build naming the drafter's and the target's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from transformers import AutoModelForCausalLM

from drafter_build import export_check, onnx_export
from drafter_build.build import main as build_main
from drafter_svc.draft_sampling import TAIL_MASS
from drafter_svc.drafter_models import DrafterModels, resolve_default_drafter
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.onnx_drafter import OnnxDrafter
from drafter_svc.server import main as serve_drafter
from specdec.errors import FailedPrecondition
from specdec.sampling_params import SamplingParams
from specdec.tokenizer import Tokenizer
from tests.drafter_build.tiny_model import VOCAB, tiny_model_folder

CONTEXT = [int(t) for t in torch.randint(3, VOCAB, (20,), generator=torch.Generator().manual_seed(3))]  # longer than the window


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama target folder with the tiny tokenizer."""
    return tiny_model_folder(tmp_path_factory.mktemp("target"), "llama")


@pytest.fixture(scope="module")
def built(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target's own int8 drafter (the Llama graph), built for the target."""
    out = tmp_path_factory.mktemp("built") / "quantized"
    assert build_main(["quantized", "--model", str(target), "--out", str(out)]) == 0
    return out


def build(target: Path, drafter: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit code, the last line on stderr: the build's own message, after transformers' progress bars)."""
    code = build_main(["small", "--model", str(target), "--from", str(drafter), "--out", str(out)])
    return code, (capsys.readouterr().err.strip().splitlines() or [""])[-1]


def models(folder: Path, target: Path, fingerprint: str | None = None) -> DrafterModels:
    return DrafterModels({"small": folder}, fingerprint or Tokenizer(target).fingerprint, target=str(target))


@pytest.mark.parametrize("architecture", ["qwen2-window", "qwen3", "gemma3", "phi3"])
def test_a_small_model_of_another_architecture_builds_and_drafts_with_torchs_q(
    architecture: str, target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tiny_model_folder(tmp_path / "model", architecture, seed=1)
    code, err = build(target, source, tmp_path / "drafter", capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "drafter" / "manifest.json").read_text())
    check = manifest["check"]["float32"]
    print(f"{architecture}: {check}")
    assert manifest["check"]["passed"] and manifest["created_with"]["graph"] == "generic"
    assert check["max_abs_logit_diff"] <= check["tolerance"] == pytest.approx(export_check.FLOAT32_RELATIVE_TOLERANCE * check["logit_scale"])
    model = AutoModelForCausalLM.from_pretrained(str(source), attn_implementation="eager").eval()
    assert manifest["drafter"] == {"architecture": type(model).__name__, "model_dir": str(source.resolve())}

    drafter = make_drafter("onnx-small", SamplingParams(1.0), seed=0, models=models(tmp_path / "drafter", target))
    assert isinstance(drafter, OnnxDrafter)
    draft = drafter.propose(CONTEXT, 3)
    assert len(draft) == 3
    for depth, (ids, probs) in enumerate(zip(draft.q_token_ids, draft.q_probs)):
        with torch.no_grad():
            p = torch.softmax(model(torch.tensor([CONTEXT + draft.token_ids[:depth]])).logits[0, -1].double(), -1).numpy()
        kept = p[ids].sum()
        assert kept >= 1 - TAIL_MASS - 1e-6
        assert np.abs(np.array(probs) - p[ids] / kept).max() < 1e-4


def corrupt_first_weight(export):  # type: ignore[no-untyped-def]
    """onnx_export.export, then one weight of the written graph moved by 1.0 (a broken export)."""

    def broken(model, out_dir: Path, graph: str = "auto") -> Path:  # type: ignore[no-untyped-def]
        path = export(model, out_dir, graph)
        graph_proto = onnx.load(str(path))
        weight = max(graph_proto.graph.initializer, key=lambda t: int(np.prod(t.dims)) if t.data_type == onnx.TensorProto.FLOAT else 0)
        array = numpy_helper.to_array(weight).copy()
        array.flat[0] += 1.0
        weight.CopyFrom(numpy_helper.from_array(array, weight.name))
        onnx.save(graph_proto, str(path))
        return path

    return broken


def test_a_broken_export_fails_the_build_and_the_service_refuses_it(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_export, "export", corrupt_first_weight(onnx_export.export))
    out = tmp_path / "drafter"
    code, err = build(target, target, out, capsys)
    print(err)
    assert code == 1 and err.startswith("specdec draft build: ")
    assert "largest |logit difference| from torch" in err and "> tolerance" in err and str(out) in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["check"]["passed"] is False
    assert f"{manifest['check']['float32']['max_abs_logit_diff']:.3g}" in err

    with pytest.raises(FailedPrecondition, match="failed its export check") as refused:
        make_drafter("onnx-small", models=models(out, target))
    assert str(out) in refused.value.message and str(target) in refused.value.message
    assert resolve_default_drafter("auto", DrafterModels({"quantized": out}, Tokenizer(target).fingerprint)) == "copy"
    with pytest.raises(SystemExit) as exited:  # a drafter named at start: the process exits with one line
        serve_drafter(["--model", str(target), "--drafter", "onnx-small", "--onnx-small-dir", str(out), "--verifier", "127.0.0.1:1", "--port", "0"])
    message = str(exited.value.code)
    assert len(message.splitlines()) == 1 and "failed its export check" in message and str(out) in message


def test_a_drafter_of_another_tokenizer_is_refused_naming_both(
    target: Path, built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tiny_model_folder(tmp_path / "foreign", "qwen3", characters=" abcdefghijklmnopqrstuvwxyz9876543210.,():#+\n")
    code, err = build(target, foreign, tmp_path / "drafter", capsys)
    assert code == 1 and err.startswith("specdec draft build: ")
    target_fingerprint, foreign_fingerprint = Tokenizer(target).fingerprint, Tokenizer(foreign).fingerprint
    assert str(foreign) in err and target_fingerprint[:12] in err and foreign_fingerprint[:12] in err

    # A build for the target, loaded by a service of another target.
    with pytest.raises(FailedPrecondition, match="another tokenizer") as refused:
        make_drafter("onnx-quantized", models=DrafterModels({"quantized": built}, foreign_fingerprint, target=str(foreign)))
    message = refused.value.message
    assert all(name in message for name in (str(target), target_fingerprint[:12], str(foreign), foreign_fingerprint[:12]))


def test_a_build_from_before_the_check_is_refused(target: Path, built: Path, tmp_path: Path) -> None:
    unchecked = tmp_path / "unchecked"
    shutil.copytree(built, unchecked)
    manifest = json.loads((unchecked / "manifest.json").read_text())
    del manifest["check"]
    (unchecked / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FailedPrecondition, match="predates the export check"):
        make_drafter("onnx-quantized", models=DrafterModels({"quantized": unchecked}, Tokenizer(target).fingerprint))
    assert make_drafter("onnx-quantized", models=DrafterModels({"quantized": built}, Tokenizer(target).fingerprint)) is not None
