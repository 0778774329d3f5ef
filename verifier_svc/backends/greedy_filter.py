"""The greedy head's bound (verifier_svc/greedy_head.py) as onnxruntime nodes, appended to the
verifier's step graph (onnx_passes.py): from the final norm's rows it computes each row's
two-level int8 activations, their exact integer products with the head's int8 values
(MatMulInteger, uint8 activations around a zero point of 128), the approximate logits, their
bounds and the candidates. In the step, the product runs on the step's own threads right after
its last layer: torch's int8 kernel, called after the step, cost a one-token pass 2.4 ms against
0.7 for this product (docs/design/greedy-head.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from verifier_svc.greedy_head import LEVELS, GreedyHeadTables, greedy_head_tables

PREFIX = "greedy_head/"
ZERO_POINT = 128


def add_greedy_filter(graph: onnx.GraphProto, tables: GreedyHeadTables, rows: str, candidates: str) -> None:
    """Append to `graph` the nodes that read its value `rows` (float32 [1, k, in]) and write its
    new output `candidates` (bool [k, vocab]: the tokens whose bound reaches the row's best lower
    bound). k may be 0."""
    vocab = tables.scales.shape[0]

    def name(text: str) -> str:
        return PREFIX + text

    constants = {
        "axis0": np.asarray([0], np.int64),
        "levels": np.asarray(LEVELS, np.float32),
        "low": np.asarray(-LEVELS, np.float32),
        "high": np.asarray(LEVELS, np.float32),
        "tiny": np.asarray(np.finfo(np.float32).tiny, np.float32),
        "shift": np.asarray(ZERO_POINT, np.float32),
        "zero_point": np.asarray(ZERO_POINT, np.uint8),
        "values": tables.values.numpy(),
        "scales": tables.scales.numpy(),
        "weight_terms": tables.weight_terms.numpy(),
        "row_norms": tables.row_norms.numpy(),
    }
    graph.initializer.extend(numpy_helper.from_array(value, name(key)) for key, value in constants.items())
    nodes = [
        ("Squeeze", [rows, name("axis0")], ["h"], {}),
        *_level("h", "1"),
        ("Sub", ["h", "x1"], ["d1"], {}),
        *_level("d1", "2"),
        ("Sub", ["d1", "x2"], ["residual"], {}),
        ("ReduceL2", ["h"], ["h_norm"], {"axes": [1], "keepdims": 1}),
        ("ReduceL2", ["residual"], ["residual_norm"], {"axes": [1], "keepdims": 1}),
        # The two levels' int8 values as uint8 rows (r + 128), products exact in int32.
        ("Concat", ["r1", "r2"], ["r"], {"axis": 0}),
        ("Add", ["r", name("shift")], ["r_shifted"], {}),
        ("Cast", ["r_shifted"], ["r_uint8"], {"to": TensorProto.UINT8}),
        ("MatMulInteger", ["r_uint8", name("values"), name("zero_point")], ["products"], {}),
        ("Cast", ["products"], ["products_float"], {"to": TensorProto.FLOAT}),
        ("Split", ["products_float"], ["p1", "p2"], {"axis": 0}),
        ("Mul", ["p1", "a1"], ["t1"], {}),
        ("Mul", ["p2", "a2"], ["t2"], {}),
        ("Add", ["t1", "t2"], ["t"], {}),
        ("Mul", ["t", name("scales")], ["approx"], {}),
        ("Mul", ["h_norm", name("weight_terms")], ["b1"], {}),
        ("Mul", ["residual_norm", name("row_norms")], ["b2"], {}),
        ("Add", ["b1", "b2"], ["bound"], {}),
        ("Sub", ["approx", "bound"], ["lower"], {}),
        ("ReduceMax", ["lower"], ["best_lower"], {"axes": [1], "keepdims": 1}),
        ("Add", ["approx", "bound"], ["upper"], {}),
        ("GreaterOrEqual", ["upper", "best_lower"], [candidates], {}),
    ]
    for i, (op, inputs, outputs, attributes) in enumerate(nodes):
        graph.node.append(
            helper.make_node(
                op, [_scoped(x, rows) for x in inputs], [_scoped(x, candidates) for x in outputs], name=name(f"{op}_{i}"), **attributes,
            )
        )
    graph.output.append(helper.make_tensor_value_info(candidates, TensorProto.BOOL, ["k", vocab]))


def with_greedy_filter(path: Path, weight: torch.Tensor, rows: str, candidates: str) -> Path:
    """The graph at `path` with the nodes of the head `weight`'s bound appended (add_greedy_filter),
    written back in place, its tensors in a file beside it (a model past protobuf's 2 GB keeps the
    exporter's own files of weights: they are not read here)."""
    model = onnx.load(str(path), load_external_data=False)
    add_greedy_filter(model.graph, greedy_head_tables(weight), rows, candidates)
    onnx.save(model, str(path), save_as_external_data=True, location=f"{path.name}.data", size_threshold=1024)
    return path


def _level(source: str, level: str) -> list[tuple[str, list[str], list[str], dict]]:
    """Nodes writing r{level} (int8 values as float32) and a{level} (their scale a row, [k, 1])
    for `source`, and x{level} = r a."""
    r, a, x = f"r{level}", f"a{level}", f"x{level}"
    return [
        ("Abs", [source], [f"abs{level}"], {}),
        ("ReduceMax", [f"abs{level}"], [f"max{level}"], {"axes": [1], "keepdims": 1}),
        ("Div", [f"max{level}", PREFIX + "levels"], [f"unclamped_a{level}"], {}),
        ("Max", [f"unclamped_a{level}", PREFIX + "tiny"], [a], {}),
        ("Div", [source, a], [f"scaled{level}"], {}),
        ("Round", [f"scaled{level}"], [f"rounded{level}"], {}),
        ("Clip", [f"rounded{level}", PREFIX + "low", PREFIX + "high"], [r], {}),
        ("Mul", [r, a], [x], {}),
    ]


def _scoped(value: str, outer: str) -> str:
    """A node's value name: the graph's own (`outer`) and initializers as they are, the filter's
    intermediate values under PREFIX."""
    return value if value == outer or value.startswith(PREFIX) else PREFIX + value
