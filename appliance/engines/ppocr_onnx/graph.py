"""Exact FP32 graph rewrites: done by the engine when it loads a model, and before quantization.

PP-OCRv5's PP-LCNetV3 backbones follow every convolution with a "learnable affine block": a
scalar Mul and a scalar Add, and every hard-swish with another one. onnxruntime folds BatchNorm
and a bias Add into the Conv, but not these scalars, so they stay as separate element-wise passes
over the biggest tensors of the network (about a third of recognition time in the profile) and,
once quantized, each of them costs a DequantizeLinear/QuantizeLinear pair. Folding them into the
convolution weights is exact up to float rounding:

- Conv(W, B) -> Mul(s) -> Add(t)          becomes Conv(s*W, s*B + t)
- X -> Mul(s) -> Add(t) -> Conv1x1(W, B)   becomes Conv1x1(s*W, B + t*sum(W)) when the Conv has no
  padding (with padding the border would differ) and is the Add's only consumer.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def _scalar(initializers: dict[str, onnx.TensorProto], name: str) -> float | None:
    tensor = initializers.get(name)
    if tensor is None:
        return None
    value = numpy_helper.to_array(tensor)
    if value.size != 1:
        return None
    return float(value.reshape(-1)[0])


def _other_input(node: onnx.NodeProto, name: str) -> str | None:
    others = [value for value in node.input if value != name]
    return others[0] if len(others) == 1 else None


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


class _Graph:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.initializers = {tensor.name: tensor for tensor in self.graph.initializer}
        self.outputs = {value.name for value in self.graph.output}
        self.serial = 0

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        return [node for node in self.graph.node if name in node.input]

    def single_consumer(self, name: str, op_type: str) -> onnx.NodeProto | None:
        if name in self.outputs:
            return None
        users = self.consumers(name)
        if len(users) == 1 and users[0].op_type == op_type:
            return users[0]
        return None

    def affine_after(self, name: str) -> tuple[onnx.NodeProto, onnx.NodeProto, float, float] | None:
        """The scalar Mul -> Add pair that alone consumes `name`, with its scale and shift."""
        mul = self.single_consumer(name, "Mul")
        if mul is None:
            return None
        scale_name = _other_input(mul, name)
        scale = _scalar(self.initializers, scale_name) if scale_name else None
        add = self.single_consumer(mul.output[0], "Add")
        if scale is None or add is None:
            return None
        shift_name = _other_input(add, mul.output[0])
        shift = _scalar(self.initializers, shift_name) if shift_name else None
        if shift is None:
            return None
        return mul, add, scale, shift

    def weights(self, conv: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
        if len(conv.input) < 2 or conv.input[1] not in self.initializers:
            return None
        weight = numpy_helper.to_array(self.initializers[conv.input[1]]).astype(np.float32)
        if len(conv.input) > 2 and conv.input[2]:
            if conv.input[2] not in self.initializers:
                return None
            bias = numpy_helper.to_array(self.initializers[conv.input[2]]).astype(np.float32)
        else:
            bias = np.zeros(weight.shape[0], dtype=np.float32)
        return weight, bias

    def set_weights(self, conv: onnx.NodeProto, weight: np.ndarray, bias: np.ndarray) -> None:
        # New names: an initializer may be shared, and the originals are dropped if unused.
        self.serial += 1
        weight_name = f"{conv.output[0]}_folded_w{self.serial}"
        bias_name = f"{conv.output[0]}_folded_b{self.serial}"
        for name, array in ((weight_name, weight), (bias_name, bias)):
            tensor = numpy_helper.from_array(array.astype(np.float32), name)
            self.graph.initializer.append(tensor)
            self.initializers[name] = tensor
        del conv.input[1:]
        conv.input.extend([weight_name, bias_name])

    def remove(self, nodes: list[onnx.NodeProto]) -> None:
        for node in nodes:
            self.graph.node.remove(node)

    def prune_initializers(self) -> None:
        used = {name for node in self.graph.node for name in node.input}
        used |= self.outputs
        keep = [tensor for tensor in self.graph.initializer if tensor.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(keep)


def _rename_input(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for index, value in enumerate(node.input):
            if value == old:
                node.input[index] = new


def _affine_before_pointwise(
    graph: _Graph, conv: onnx.NodeProto
) -> tuple[onnx.NodeProto, onnx.NodeProto, float, float, str, tuple[np.ndarray, np.ndarray]] | None:
    """The scalar Mul -> Add pair that feeds only this unpadded 1x1 Conv, if there is one."""
    weights = graph.weights(conv)
    if weights is None or _attribute(conv, "group", 1) != 1:
        return None
    pads = _attribute(conv, "pads", [0, 0, 0, 0])
    auto_pad = _attribute(conv, "auto_pad", b"NOTSET")
    if weights[0].shape[2:] != (1, 1) or not isinstance(pads, list) or any(pads):
        return None
    if auto_pad not in (b"NOTSET", b"VALID"):
        return None
    producers = {node.output[0]: node for node in graph.graph.node if node.output}
    add = producers.get(conv.input[0])
    if add is None or add.op_type != "Add" or len(graph.consumers(add.output[0])) != 1:
        return None
    mul = next((producers[value] for value in add.input if value in producers), None)
    if mul is None or mul.op_type != "Mul" or len(graph.consumers(mul.output[0])) != 1:
        return None
    shift_name = _other_input(add, mul.output[0])
    shift = _scalar(graph.initializers, shift_name) if shift_name else None
    scale_names = [value for value in mul.input if value in graph.initializers]
    sources = [value for value in mul.input if value not in graph.initializers]
    if shift is None or len(scale_names) != 1 or len(sources) != 1:
        return None
    scale = _scalar(graph.initializers, scale_names[0])
    if scale is None:
        return None
    return mul, add, scale, shift, sources[0], weights


def fold_affine_into_conv(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Fold scalar Mul/Add pairs into neighbouring Convs (see the module docstring); returns the count.

    The model should already have BatchNorm and bias Adds folded and Identity nodes removed
    (onnxruntime's basic level does that; `optimize_basic` below).
    """
    graph = _Graph(model)
    folded = 0
    for conv in [node for node in graph.graph.node if node.op_type == "Conv"]:
        found = graph.affine_after(conv.output[0])
        weights = graph.weights(conv)
        if found is None or weights is None:
            continue
        mul, add, scale, shift = found
        weight, bias = weights
        graph.set_weights(conv, weight * scale, bias * scale + shift)
        _rename_input(graph.graph, add.output[0], conv.output[0])
        if add.output[0] in graph.outputs:  # pragma: no cover - affine_after refuses graph outputs
            continue
        graph.remove([mul, add])
        folded += 1
    for conv in [node for node in graph.graph.node if node.op_type == "Conv"]:
        found_after = _affine_before_pointwise(graph, conv)
        if found_after is None:
            continue
        mul, add, scale, shift, source, (weight, bias) = found_after
        graph.set_weights(conv, weight * scale, bias + shift * weight.sum(axis=(1, 2, 3)))
        conv.input[0] = source
        graph.remove([mul, add])
        folded += 1
    graph.prune_initializers()
    return model, folded


def fuse_hard_swish(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Replace x * HardSigmoid(x) (alpha 1/6, beta 0.5, as Paddle exports hard-swish) by HardSwish.

    One element-wise pass instead of two, and one op for the quantizer instead of a HardSigmoid it
    cannot quantize followed by a QLinearMul. Needs opset 14 or later.
    """
    graph = _Graph(model)
    fused = 0
    for sigmoid in [node for node in graph.graph.node if node.op_type == "HardSigmoid"]:
        alpha = float(_attribute(sigmoid, "alpha", 0.2))  # type: ignore[arg-type]
        beta = float(_attribute(sigmoid, "beta", 0.5))  # type: ignore[arg-type]
        if abs(alpha - 1 / 6) > 1e-4 or abs(beta - 0.5) > 1e-6:
            continue
        mul = graph.single_consumer(sigmoid.output[0], "Mul")
        if mul is None or sorted(mul.input) != sorted([sigmoid.input[0], sigmoid.output[0]]):
            continue
        swish = onnx.helper.make_node("HardSwish", [sigmoid.input[0]], [mul.output[0]], name=mul.name or None)
        position = list(graph.graph.node).index(mul)
        graph.remove([sigmoid, mul])
        graph.graph.node.insert(position - 1, swish)
        fused += 1
    return model, fused


def hard_swish_as_clip(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Write each HardSwish as x * Clip(x + 3, 0, 6) * (1/6): the same function, other operators.

    onnxruntime has no quantized HardSwish (nor HardSigmoid), so a QDQ graph computes each one in
    float between a Dequantize and a Quantize pass over the whole activation; Add, Clip and Mul
    all have integer forms (QLinearAdd, a Clip folded into the quantization range, QLinearMul), so
    in this form the quantized graph stays in uint8 from one convolution to the next.
    """
    graph = model.graph
    constants = {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1.0 / 6.0}
    names = {key: f"hard_swish_as_clip_{key}" for key in constants}
    nodes: list[onnx.NodeProto] = []
    rewritten = 0
    for node in graph.node:
        if node.op_type != "HardSwish":
            nodes.append(node)
            continue
        x, prefix = node.input[0], f"{node.name or node.output[0]}_clip_form"
        nodes += [
            onnx.helper.make_node("Add", [x, names["three"]], [f"{prefix}_shifted"], name=f"{prefix}_add"),
            onnx.helper.make_node(
                "Clip",
                [f"{prefix}_shifted", names["zero"], names["six"]],
                [f"{prefix}_gate"],
                name=f"{prefix}_clip",
            ),
            onnx.helper.make_node("Mul", [x, f"{prefix}_gate"], [f"{prefix}_gated"], name=f"{prefix}_mul"),
            onnx.helper.make_node(
                "Mul", [f"{prefix}_gated", names["sixth"]], [node.output[0]], name=f"{prefix}_scale"
            ),
        ]
        rewritten += 1
    if rewritten:
        graph.initializer.extend(
            numpy_helper.from_array(np.array(value, dtype=np.float32), names[key])
            for key, value in constants.items()
        )
        del graph.node[:]
        graph.node.extend(nodes)
    return model, rewritten


def name_nodes(model: onnx.ModelProto) -> int:
    """Give every unnamed node a unique name.

    Exclusions are by node name, and the Paddle export leaves a few nodes (the final Softmax
    among them) unnamed, so excluding "" would hit them all.
    """
    taken = {node.name for node in model.graph.node if node.name}
    named = 0
    for index, node in enumerate(model.graph.node):
        if node.name:
            continue
        candidate = f"{node.op_type}_unnamed_{index}"
        while candidate in taken:
            candidate += "_"
        node.name = candidate
        taken.add(candidate)
        named += 1
    return named


def optimize_basic(source: Path, target: Path) -> None:
    """Write the model after onnxruntime's basic level (BatchNorm and bias folded, Identity removed).

    Basic only: its rewrites are standard ONNX ops; extended/all emit CPU-only fused ops.
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])


def folded_model(source: Path) -> tuple[bytes, int]:
    """The serialized model with the affine pairs folded into its convolutions, and how many were.

    Done in memory when the engine loads an FP32 model, after its sha256 was checked, so the
    shipped files and their manifest stay the originals.
    """
    with tempfile.TemporaryDirectory(prefix="ppocr-fold-") as tmp:
        basic = Path(tmp) / "basic.onnx"
        optimize_basic(source, basic)
        model = onnx.load(str(basic))
    model, folded = fold_affine_into_conv(model)
    return model.SerializeToString(), folded


def _ctc_head(graph: _Graph) -> tuple[str, str]:
    """Names of the weight and bias of the last MatMul + Add before the output Softmax."""
    producers = {output: node for node in graph.graph.node for output in node.output}
    softmax = next(
        (node for node in graph.graph.node if node.op_type == "Softmax" and node.output[0] in graph.outputs),
        None,
    )
    if softmax is None:
        raise ValueError("no Softmax gives the model's output")
    node = producers.get(softmax.input[0])
    while node is not None and node.op_type == "Identity":
        node = producers.get(node.input[0])
    if node is None or node.op_type != "Add":
        raise ValueError("the output Softmax does not follow a bias Add")
    biases = [name for name in node.input if name in graph.initializers]
    matmuls = [
        producers[name] for name in node.input if name in producers and producers[name].op_type == "MatMul"
    ]
    weights = [name for name in matmuls[0].input if name in graph.initializers] if len(matmuls) == 1 else []
    if len(biases) != 1 or len(weights) != 1:
        raise ValueError("the output Softmax does not follow a MatMul with constant weights and a bias")
    return weights[0], biases[0]


def restrict_output_classes(serialized: bytes, kept: list[int], classes: int) -> bytes:
    """The recogniser with its CTC head cut to the `kept` classes (see charset.py).

    The head's weight columns and bias entries outside `kept` are dropped, so the output Softmax
    runs over the kept classes only. `classes` is the dictionary's length, checked against the
    head's width first.
    """
    model = onnx.load_from_string(serialized)
    graph = _Graph(model)
    weight_name, bias_name = _ctc_head(graph)
    weight = numpy_helper.to_array(graph.initializers[weight_name])
    bias = numpy_helper.to_array(graph.initializers[bias_name])
    if weight.shape[-1] != classes or bias.shape[-1] != classes:
        raise ValueError(f"the head has {weight.shape[-1]} classes, the dictionary {classes}")
    columns = np.asarray(kept, dtype=np.int64)
    graph.initializers[weight_name].CopyFrom(
        numpy_helper.from_array(np.ascontiguousarray(weight[..., columns]), weight_name)
    )
    graph.initializers[bias_name].CopyFrom(numpy_helper.from_array(bias[..., columns], bias_name))
    for value in model.graph.output:  # the declared class dimension, where the export fixed one
        dims = value.type.tensor_type.shape.dim
        if dims and dims[-1].HasField("dim_value"):
            dims[-1].dim_value = len(kept)
    return model.SerializeToString()
