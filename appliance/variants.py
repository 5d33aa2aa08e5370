"""Variant specs such as `det=int8+rec_min_width=160`: one word for an engine and rasterize configuration.

The benchmarks (`bench.ocr_bench --variant`, `bench.ort_profile`) name the configurations they
compare this way; a spec is the precision (`fp32`, `int8`, or per role `det=int8,rec=fp32`) and
`+key=value` options, each an engine.ppocr_onnx key or a rasterize key.
"""

from __future__ import annotations

from typing import Any

from appliance.config import EngineConfig, PpocrOnnxConfig, RasterizeConfig


def _option_value(value: str) -> int | float | bool | str:
    """A variant option's value as YAML would type it: 960 -> int, 0.5 -> float, false -> bool."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def variant_rasterize_config(base: RasterizeConfig, spec: str) -> RasterizeConfig:
    """The rasterize config with a variant's rasterize options, e.g. `fp32+jpeg_draft_megapixels=0`."""
    _, *options = spec.split("+")
    updates = {}
    for option in options:
        key, _, value = option.partition("=")
        if key in RasterizeConfig.model_fields:
            updates[key] = _option_value(value)
    return RasterizeConfig.model_validate({**base.model_dump(), **updates})


def variant_engine_config(base: EngineConfig, spec: str) -> EngineConfig:
    """The engine config with a variant's precision and options, e.g. `rec=int8+threads=1`."""
    precision_part, *options = spec.split("+")
    options = [option for option in options if option.partition("=")[0] not in RasterizeConfig.model_fields]
    roles = ("det", "cls", "rec")
    if precision_part in ("fp32", "fp16", "int8"):
        precision = dict.fromkeys(roles, precision_part)
    else:
        precision = base.ppocr_onnx.precision.model_dump()
        for item in precision_part.split(","):
            role, _, value = item.partition("=")
            precision[role] = value
    updates: dict[str, Any] = {"precision": precision}
    for option in options:
        key, _, value = option.partition("=")
        field_name = {"threads": "intra_op_threads", "det_limit": "det_limit_side_len"}.get(key, key)
        if field_name == "second_reader":  # `second_reader=ppocrv5_mobile@0.9`
            models, _, limit = value.partition("@")
            updates[field_name] = {"models": models, **({"min_confidence": float(limit)} if limit else {})}
            continue
        updates[field_name] = _option_value(value)
    # Only the keys the base config set itself, so that the keys a preset fills stay the preset's.
    merged = {**base.ppocr_onnx.model_dump(exclude_unset=True), **updates}
    return base.model_copy(update={"ppocr_onnx": PpocrOnnxConfig.model_validate(merged)})
