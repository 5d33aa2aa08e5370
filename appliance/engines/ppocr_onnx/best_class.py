"""The recogniser's best class per CTC step computed inside the graph, for the GPU.

A recogniser answers a (batch, steps, classes) tensor of probabilities: for PP-OCRv6's 18,710
classes a batch of 8 lines at 3200 px is 240 MB that the CUDA provider copies to the host, where
the decoder keeps one class and its probability per step (21 ms of numpy arg-max alone on the
2-core machine). A TopK(k=1) appended to the graph hands back those two (batch, steps) tensors
instead, a few kB; the probabilities stay a graph output, so the class count still reads from it,
but a run that asks only for BEST_OUTPUTS never copies them. TopK keeps the lower index of equal
values, as numpy's arg-max does, so the reads are the same. A third output, SPACE_OUTPUT, is the
last class's probability at every step (PP-OCR heads put the space last): the spacing rule's
evidence (spacing.py), one float a step. EVIDENCE_OUTPUTS, asked for only where a cascade weighs
reads by both readers (`keep: joint`), are each step's TOP_CLASSES likeliest classes with their
probabilities and the blank's probability (step_evidence.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

BEST_SCORE = "ctc_best_score"
BEST_INDEX = "ctc_best_index"
BEST_OUTPUTS = [BEST_SCORE, BEST_INDEX]
SPACE_OUTPUT = "ctc_last_class_probability"
TOP_CLASSES = 4
TOP_SCORES = "ctc_top_scores"
TOP_INDICES = "ctc_top_indices"
BLANK_OUTPUT = "ctc_blank_probability"
EVIDENCE_OUTPUTS = [TOP_SCORES, TOP_INDICES, BLANK_OUTPUT]
_TOP_K = "ctc_top_k"
_BLANK = "ctc_blank_class"
_K = "ctc_best_k"
_LAST = "ctc_last_class"


def append_best_class(model: bytes | Path) -> bytes:
    """The serialized recogniser with its best class, that class's probability and the last class's."""
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))
    graph = proto.graph
    probabilities = graph.output[0].name
    graph.initializer.append(numpy_helper.from_array(np.array([1], dtype=np.int64), name=_K))
    graph.node.append(
        helper.make_node(
            "TopK", [probabilities, _K], [BEST_SCORE + "_k", BEST_INDEX + "_k"], axis=-1, name="ctc_best_topk"
        )
    )
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), name="ctc_best_axes")
    graph.initializer.append(axes)
    # Squeeze takes its axes as an input from opset 13 and as an attribute before it.
    opset = next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")), 13)
    for source, target in ((BEST_SCORE + "_k", BEST_SCORE), (BEST_INDEX + "_k", BEST_INDEX)):
        if opset >= 13:
            node = helper.make_node("Squeeze", [source, axes.name], [target], name=target)
        else:
            node = helper.make_node("Squeeze", [source], [target], axes=[-1], name=target)
        graph.node.append(node)
    # A scalar index on the class axis drops that axis: (batch, steps).
    graph.initializer.append(numpy_helper.from_array(np.array(-1, dtype=np.int64), name=_LAST))
    graph.node.append(
        helper.make_node("Gather", [probabilities, _LAST], [SPACE_OUTPUT], axis=-1, name=SPACE_OUTPUT)
    )
    graph.initializer.append(numpy_helper.from_array(np.array([TOP_CLASSES], dtype=np.int64), name=_TOP_K))
    graph.node.append(
        helper.make_node("TopK", [probabilities, _TOP_K], [TOP_SCORES, TOP_INDICES], axis=-1, name="ctc_top")
    )
    graph.initializer.append(numpy_helper.from_array(np.array(0, dtype=np.int64), name=_BLANK))
    graph.node.append(
        helper.make_node("Gather", [probabilities, _BLANK], [BLANK_OUTPUT], axis=-1, name=BLANK_OUTPUT)
    )
    graph.output.extend(
        [
            helper.make_tensor_value_info(BEST_SCORE, onnx.TensorProto.FLOAT, None),
            helper.make_tensor_value_info(BEST_INDEX, onnx.TensorProto.INT64, None),
            helper.make_tensor_value_info(SPACE_OUTPUT, onnx.TensorProto.FLOAT, None),
            helper.make_tensor_value_info(TOP_SCORES, onnx.TensorProto.FLOAT, None),
            helper.make_tensor_value_info(TOP_INDICES, onnx.TensorProto.INT64, None),
            helper.make_tensor_value_info(BLANK_OUTPUT, onnx.TensorProto.FLOAT, None),
        ]
    )
    return bytes(proto.SerializeToString())


def has_best_class(output_names: list[str]) -> bool:
    """Whether a session's outputs include the best-class pair of append_best_class."""
    return all(name in output_names for name in BEST_OUTPUTS)


def head_classes(model: bytes | Path) -> int | None:
    """The class count of a recogniser's probabilities (its first output's last axis), if fixed."""
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    return dims[-1].dim_value if dims and dims[-1].dim_value > 0 else None
