"""The int8-bounded greedy head (verifier_svc/greedy_head.py, its nodes backends/greedy_filter.py,
run by onnxruntime as the verifier runs them): every float32 logit lies within its bound (against
float64 arithmetic, over heads and hidden rows of very different scales and tails), the bound
leaves most tokens out, and each row's argmax is that of the float32 head, near ties included."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from verifier_svc.backends.greedy_filter import PREFIX, add_greedy_filter, with_greedy_filter
from verifier_svc.greedy_head import greedy_head_tables, rescored


def filter_session(weight: torch.Tensor) -> ort.InferenceSession:
    """The filter alone over rows [1, k, in], its approximate logits and bounds as outputs too."""
    vocab, width = weight.shape
    graph = helper.make_graph([], "filter", [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, "k", width])], [])
    add_greedy_filter(graph, greedy_head_tables(weight), "rows", "candidates")
    for value in ("approx", "bound"):
        graph.output.append(helper.make_tensor_value_info(PREFIX + value, TensorProto.FLOAT, ["k", vocab]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def head_and_rows(seed: int, vocab: int = 3000, width: int = 96, rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """A head whose rows' scales span 4 decades (some with a few huge weights) and hidden rows
    of random scale with heavy tails (a few entries 10-20x the rest, as hidden states have)."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, width, generator=g) * 10 ** (2 * torch.rand(vocab, 1, generator=g) - 2)
    weight[: vocab // 10, :3] *= 40
    hidden = torch.randn(rows, width, generator=g) * torch.exp(torch.randn(rows, width, generator=g)) * 10 ** (2 * torch.rand(rows, 1, generator=g))
    return weight, hidden


def greedy_logits(weight: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
    """(rescored logits, candidates, approx, bound) of float32 rows hidden [k, in]."""
    candidates, approx, bound = filter_session(weight).run(["candidates", PREFIX + "approx", PREFIX + "bound"], {"rows": hidden[None].numpy()})
    return rescored(weight.numpy(), hidden.numpy(), candidates), candidates, approx, bound


@pytest.mark.parametrize("seed", range(10))
def test_every_float32_logit_lies_within_its_bound(seed: int) -> None:
    weight, hidden = head_and_rows(seed)
    _, _, approx, bound = greedy_logits(weight, hidden)
    exact = hidden.double().numpy() @ weight.double().numpy().T
    float32 = (hidden @ weight.T).numpy()
    assert (np.abs(approx - exact) <= bound).all() and (np.abs(approx - float32) <= bound).all()
    assert (np.abs(approx - exact) / bound).max() > 1e-2, "the bound is not vacuous"


@pytest.mark.parametrize("seed", range(10))
def test_each_rows_argmax_is_the_float32_heads(seed: int) -> None:
    weight, hidden = head_and_rows(seed)
    logits, candidates, _, _ = greedy_logits(weight, hidden)
    full = hidden @ weight.T
    assert torch.equal(logits.argmax(dim=1), full.argmax(dim=1))
    kept = torch.isfinite(logits)
    assert torch.equal(kept, torch.from_numpy(candidates))
    assert torch.allclose(logits[kept], full[kept], rtol=1e-5, atol=1e-5), "the kept logits are the float32 head's"
    assert bool(kept.sum(dim=1).lt(weight.shape[0] // 10).all()), "most tokens are left out"


def test_near_ties_go_as_the_float32_head_has_them() -> None:
    """Rows that differ from the winner by one float32 step, and exact duplicates (ties to the
    lowest id), are all kept and decided in float32."""
    weight, hidden = head_and_rows(3, rows=1)
    best = int((hidden @ weight.T).argmax())
    weight[10] = weight[best]  # an exact duplicate with a lower id: it wins the tie
    weight[2000] = weight[best] * (1 + 2**-23)  # one float32 step larger
    weight[2001] = weight[best] * (1 - 2**-23)
    logits, _, _, _ = greedy_logits(weight, hidden)
    for token in (10, best, 2000, 2001):
        assert torch.isfinite(logits[0, token])
    assert int(logits.argmax()) == int((hidden @ weight.T).argmax())


def test_a_peaked_row_keeps_one_candidate() -> None:
    weight = torch.randn(3000, 96, generator=torch.Generator().manual_seed(5))
    hidden = weight[42:43] * 5 / weight[42].norm()  # logit ~49 against the others' ~N(0, 25)
    logits, _, _, _ = greedy_logits(weight, hidden)
    assert int(logits.argmax()) == 42 and int(torch.isfinite(logits).sum()) == 1


def test_rows_the_bound_cannot_narrow_are_scored_by_the_whole_head() -> None:
    """A row with a non-finite value leaves no usable bound, and a row of zeros ties every
    token: each is the float32 head's product, the other rows as before."""
    weight, hidden = head_and_rows(6, rows=3)
    hidden[1, 0] = float("inf")
    hidden[2] = 0.0
    logits, _, _, _ = greedy_logits(weight, hidden)
    full = hidden @ weight.T
    assert torch.equal(logits[1:].isnan(), full[1:].isnan()) and bool(torch.isfinite(logits[2]).all())
    assert int(logits[0].argmax()) == int(full[0].argmax()) and int(logits[2].argmax()) == 0
    assert not bool(torch.isfinite(logits[0]).all())


def test_no_rows_make_no_candidates() -> None:
    """The step runs the nodes on every pass; a pass that asks for logits gives them no rows."""
    weight, hidden = head_and_rows(7)
    candidates, approx, bound = filter_session(weight).run(["candidates", PREFIX + "approx", PREFIX + "bound"], {"rows": hidden[None, :0].numpy()})
    assert candidates.shape == approx.shape == bound.shape == (0, weight.shape[0])


def test_a_graph_whose_weights_lie_in_files_of_their_own_keeps_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """with_greedy_filter on a graph saved with external data (as torch's exporter saves a model
    past 2 GB): the exporter's files are referenced, not read; the result runs in onnxruntime."""
    weight, hidden = head_and_rows(8, rows=2)
    width = weight.shape[1]
    scale = np.full(width, 0.5, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["rows"])], "step", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "k", width])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, "k", width])], [onnx.numpy_helper.from_array(scale, "scale")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "step.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="exporters_weights", size_threshold=0)
    with_greedy_filter(path, weight, "rows", "candidates")
    assert (tmp_path / "exporters_weights").is_file() and (tmp_path / "step.onnx.data").is_file()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rows, candidates = session.run(["rows", "candidates"], {"x": hidden[None].numpy()})
    logits = rescored(weight.numpy(), rows[0], candidates)
    assert torch.equal(logits.argmax(dim=1), (hidden * 0.5 @ weight.T).argmax(dim=1))
