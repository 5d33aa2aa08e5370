"""shape_branches: one session holds a copy of a model's nodes per fixed shape, chosen by its inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from appliance.engines.ppocr_onnx.shape_branches import BRANCH, ShapeBranch, branch_feeds, branched_model


def _model(weights_as_inputs: bool = False) -> bytes:
    """A convolution and a ReLU on a (1, 3, H, W) input, its output twice the conv plus one."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    one = numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])]
    if weights_as_inputs:  # as exporters before IR version 4 wrote them
        inputs += [
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
            helper.make_tensor_value_info("one", TensorProto.FLOAT, []),
        ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Add", ["r", "one"], ["y"]),
        ],
        "small",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "h", "w"])],
        [weight, one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return bytes(model.SerializeToString())


def _session(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("weights_as_inputs", [False, True])
def test_each_copy_answers_what_the_model_answers(weights_as_inputs: bool) -> None:
    model = _model(weights_as_inputs)
    plain, branched = _session(model), _session(branched_model(model, 3))
    rng = np.random.default_rng(1)
    for index, size in enumerate(((8, 8), (16, 24), (8, 8))):
        x = rng.standard_normal((1, 3, *size)).astype(np.float32)
        expected = plain.run(None, {"x": x})[0]
        got = branched.run(None, {"x": x, **branch_feeds(index, 3)})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_the_graph_holds_one_copy_of_the_nodes_and_weights_per_shape() -> None:
    proto = onnx.load_from_string(branched_model(_model(), 3))
    assert [value.name for value in proto.graph.input] == ["x", f"{BRANCH}0", f"{BRANCH}1"]
    assert [value.name for value in proto.graph.output] == ["y"]
    assert len(proto.graph.initializer) == 0  # every copy holds its own weights

    def copies(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
        found = []
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    inner = attribute.g
                    found += copies(inner) if any(n.op_type == "If" for n in inner.node) else [inner]
        return found

    shapes = copies(proto.graph)
    assert len(shapes) == 3
    assert all([node.op_type for node in graph.node] == ["Conv", "Relu", "Add"] for graph in shapes)
    assert all(len(graph.initializer) == 2 for graph in shapes)
    names = [node.name for graph in shapes for node in graph.node]
    assert len(set(names)) == len(names)  # each copy's nodes are its own


def test_a_shape_branch_looks_like_the_model_and_runs_its_copy() -> None:
    session = _session(branched_model(_model(), 2))
    calls: list[dict[str, np.ndarray]] = []

    class Spy:
        def get_inputs(self) -> list[object]:
            return list(session.get_inputs())

        def get_outputs(self) -> list[object]:
            return list(session.get_outputs())

        def get_providers(self) -> list[str]:
            return list(session.get_providers())

        def run(self, names: object, feeds: dict[str, np.ndarray], /) -> list[object]:
            calls.append(feeds)
            return list(session.run(names, feeds))

    branch = ShapeBranch(Spy(), 1, 2)
    assert [value.name for value in branch.get_inputs()] == ["x"]
    assert [value.name for value in branch.get_outputs()] == ["y"]
    x = np.ones((1, 3, 4, 4), dtype=np.float32)
    branch.run(None, {"x": x})
    assert calls[0][f"{BRANCH}0"].dtype == np.bool_ and not bool(calls[0][f"{BRANCH}0"])


def test_impossible_branchings_are_refused() -> None:
    with pytest.raises(ValueError, match="two copies or more"):
        branched_model(_model(), 1)
    with pytest.raises(ValueError, match="copy 3 of 3"):
        branch_feeds(3, 3)
    inner = helper.make_graph([], "inner", [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)],
        "nested",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="holds a subgraph"):
        branched_model(bytes(model.SerializeToString()), 2)


def test_only_the_outputs_asked_for_are_kept() -> None:
    model = onnx.load_from_string(_model())
    model.graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, "h", "w"]))
    session = _session(branched_model(bytes(model.SerializeToString()), 2, ["y"]))
    assert [value.name for value in session.get_outputs()] == ["y"]
    with pytest.raises(ValueError, match="not the model's"):
        branched_model(_model(), 2, ["y", "z"])
