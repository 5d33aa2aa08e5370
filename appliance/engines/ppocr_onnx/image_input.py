"""The detector's input normalisation moved into its graph, so the GPU gets the page as bytes.

The detector takes a float (1, 3, H, W) tensor normalised with ImageNet's mean and deviation. Made
in numpy on the host, that is five passes over a 1280x1280 page (73 ms on the 2-core development
machine, more than the model's 5 ms on an H200) and a 20 MB copy to the GPU. With a Cast, a
Transpose, a Sub and a Mul put in front of the graph, the session takes the padded page itself,
uint8 (1, H, W, 3), a quarter of the bytes, and the GPU does the arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from appliance.engines.ppocr_onnx.sessions import ModelSession

IMAGE_INPUT = "page_bgr_uint8"


def prepend_normalisation(model: bytes | Path, mean: Sequence[float], std: Sequence[float]) -> bytes:
    """The serialized detector taking uint8 (N, H, W, C) pixels and computing (x / 255 - mean) / std itself.

    (x / 255 - mean) / std is computed as (x - 255 mean) * (1 / (255 std)): the same values to float
    rounding.
    """
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))
    graph = proto.graph
    original = graph.input[0]
    channels = len(mean)
    offset = np.array(mean, dtype=np.float32).reshape(1, channels, 1, 1) * np.float32(255.0)
    scale = np.float32(1.0) / (np.array(std, dtype=np.float32).reshape(1, channels, 1, 1) * np.float32(255.0))
    graph.initializer.extend(
        [numpy_helper.from_array(offset, "image_offset"), numpy_helper.from_array(scale, "image_scale")]
    )
    nodes = [
        helper.make_node(
            "Cast", [IMAGE_INPUT], ["image_float"], to=onnx.TensorProto.FLOAT, name="image_cast"
        ),
        helper.make_node("Transpose", ["image_float"], ["image_nchw"], perm=[0, 3, 1, 2], name="image_nchw"),
        helper.make_node("Sub", ["image_nchw", "image_offset"], ["image_centred"], name="image_centre"),
        helper.make_node("Mul", ["image_centred", "image_scale"], [original.name], name="image_scale"),
    ]
    # The graph's nodes must stay in topological order: the new ones go first.
    kept = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + kept)
    image = helper.make_tensor_value_info(IMAGE_INPUT, onnx.TensorProto.UINT8, ["n", "h", "w", channels])
    graph.input.remove(original)
    graph.input.insert(0, image)
    return bytes(proto.SerializeToString())


def takes_image(session: ModelSession) -> bool:
    """Whether a session's first input is prepend_normalisation's uint8 page."""
    node = session.get_inputs()[0]
    return bool(node.name == IMAGE_INPUT and node.type == "tensor(uint8)")
