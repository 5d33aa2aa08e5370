"""One session for all of a model's fixed shapes: the graph copied once per shape behind an If.

Under fixed shapes (shapes.py) every detector bucket and line width gets a session of its own, so
that no session's convolutions ever see a second shape. On the CUDA provider each session costs
about 150 MiB of the card whatever its model, measured with bench.gpu_memory_steps on an H200: 74
MiB when it is created and as much again at its first run, for a model of one convolution and one
matrix product as for PP-OCRv6's; the engine's ten sessions are about 1.5 GB of its 3.2 GB. What
the shapes need apart is only the nodes' own state (cuDNN's plans are kept per node), so with
engine.ppocr_onnx.shape_sessions `one` a graph holds a copy of the model's nodes and weights per
shape and bool inputs pick the copy through a chain of If nodes: one session, and each copy's
nodes still see one shape only. The conditions are inputs the caller feeds from the host
(branch_feeds), so choosing a copy costs no device work.

Measured on the H200, it saves less than hoped: onnxruntime gives each If branch (a subgraph with
state of its own) about what it gave each session, so the engine held 3,176 MiB after loading
against 3,172 with a session per shape; with eight workers through the session server the card
held 3,967 MiB against 4,243 at 13% fewer pages a second; one process reading alone peaked at
4,675 against 3,925 MiB. A session per shape stays the default (bench/README.md, "The daemon
itself, and where the card's memory goes").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from appliance.engines.ppocr_onnx.sessions import ModelSession

BRANCH = "shape_branch_is_"  # input BRANCH + str(i): run copy i (each If's condition)


def _branch_graph(graph: onnx.GraphProto, index: int, outputs: Sequence[str]) -> onnx.GraphProto:
    """The nodes and weights of `graph` as a subgraph of their own, names prefixed, the inputs outside."""
    outer = {value.name for value in graph.input} - {tensor.name for tensor in graph.initializer}
    prefix = f"b{index}/"

    def renamed(name: str) -> str:
        return name if not name or name in outer else prefix + name

    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        kinds = {attribute.type for attribute in node.attribute}
        if kinds & {onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS}:
            raise ValueError(f"node {node.name or node.op_type} holds a subgraph: not copied per shape")
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = prefix + (node.name or f"{node.op_type}_{len(nodes)}")
        copy.ClearField("input")
        copy.input.extend(renamed(name) for name in node.input)
        copy.ClearField("output")
        copy.output.extend(renamed(name) for name in node.output)
        nodes.append(copy)
    results = []
    for output in (output for output in graph.output if output.name in outputs):
        value = onnx.ValueInfoProto()
        value.CopyFrom(output)
        value.name = renamed(output.name)
        results.append(value)
    weights = []
    for tensor in graph.initializer:
        weight = onnx.TensorProto()
        weight.CopyFrom(tensor)
        weight.name = renamed(tensor.name)
        weights.append(weight)
    return helper.make_graph(nodes, f"shape_{index}", [], results, weights)


def branched_model(model: bytes | Path, count: int, outputs: Sequence[str] | None = None) -> bytes:
    """The serialized model with `count` (2 or more) copies of its nodes, the one run chosen by inputs.

    The inputs, outputs and weights are the model's, plus one bool scalar input per copy but the
    last (BRANCH + index), which branch_feeds sets. Each copy's nodes are its own, so each keeps
    the state of the one shape its callers give it. `outputs`: the model's outputs to keep (None:
    all). An If hands its copy's outputs on as outputs of its own, so an output nobody fetches is
    best left out: the recogniser's (rows, steps, classes) probabilities are 480 MB at 3200 px.
    """
    if count < 2:
        raise ValueError(f"a branched model needs two copies or more, not {count}")
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))
    graph = proto.graph
    kept = [output for output in graph.output if outputs is None or output.name in outputs]
    if outputs is not None and len(kept) != len(set(outputs)):
        raise ValueError(
            f"outputs {sorted(set(outputs) - {output.name for output in kept})} are not the model's"
        )
    del graph.output[:]
    graph.output.extend(kept)
    names = [output.name for output in kept]
    branches = [_branch_graph(graph, index, names) for index in range(count)]
    # The chain from the last copy back: If(condition i, copy i, the chain after i).
    chain = branches[-1]
    for index in range(count - 2, -1, -1):
        results = [f"shapes_from_{index}/{name}" for name in names] if index else names
        nodes = [
            helper.make_node(
                "If",
                [f"{BRANCH}{index}"],
                results,
                name=f"shape_if_{index}",
                then_branch=branches[index],
                else_branch=chain,
            )
        ]
        if index:
            typed = []
            for result, original in zip(results, graph.output, strict=True):
                value = onnx.ValueInfoProto()
                value.CopyFrom(original)
                value.name = result
                typed.append(value)
            chain = helper.make_graph(nodes, f"shapes_from_{index}", [], typed)
        else:
            del graph.node[:]
            graph.node.extend(nodes)
    del graph.value_info[:]  # the copies' inner names differ; onnxruntime infers their shapes
    weights = {tensor.name for tensor in graph.initializer}
    del graph.initializer[:]  # each copy holds its own: the optimizer then fuses as in the model
    inputs = [value for value in graph.input if value.name not in weights]  # old models list weights
    del graph.input[:]
    graph.input.extend(inputs)
    graph.input.extend(
        helper.make_tensor_value_info(f"{BRANCH}{index}", onnx.TensorProto.BOOL, [])
        for index in range(count - 1)
    )
    return bytes(proto.SerializeToString())


def branch_feeds(index: int, count: int) -> dict[str, np.ndarray]:
    """The condition inputs that run copy `index` of a model branched into `count` copies."""
    if not 0 <= index < count:
        raise ValueError(f"copy {index} of {count}")
    return {f"{BRANCH}{other}": np.array(other == index) for other in range(count - 1)}


class ShapeBranch:
    """One copy of a branched model's session, seen as a session of the model itself (ModelSession).

    Its inputs are the model's (without the condition inputs), and each run feeds the conditions
    that choose its copy.
    """

    def __init__(self, session: ModelSession, index: int, count: int) -> None:
        self._session = session
        self._feeds = branch_feeds(index, count)
        self._inputs = [value for value in session.get_inputs() if not value.name.startswith(BRANCH)]

    def get_inputs(self) -> Sequence[Any]:
        return self._inputs

    def get_outputs(self) -> Sequence[Any]:
        return self._session.get_outputs()

    def get_providers(self) -> Sequence[str]:
        return self._session.get_providers()

    def run(self, output_names: Any, input_feed: dict[str, Any], /) -> Sequence[Any]:
        return self._session.run(output_names, {**input_feed, **self._feeds})
