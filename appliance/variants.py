"""Variant specs such as `det=int8+rec_min_width=160`: one word for an engine and rasterize configuration.

The benchmarks (`bench.ocr_bench --variant`, `bench.ort_profile`) name the configurations they
compare this way; a spec is the precision (`fp32`, `int8`, or per role `det=int8,rec=fp32`) and
`+key=value` options, each an engine.ppocr_onnx key or a rasterize key. `+second_reader=MODELS@T`
adds a second ONNX recogniser (engine.onnx_reader with that model set) reading again the lines
the first one reads below confidence T, through the line cascade; `+keep=more_confident` makes
each such line keep the surer of its two reads instead of the second.
"""

from __future__ import annotations

from typing import Any

from appliance.config import CascadeConfig, EngineConfig, OnnxReaderConfig, PpocrOnnxConfig, RasterizeConfig


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


# Options that configure the cascade, not engine.ppocr_onnx.
_CASCADE_OPTIONS = ("second_reader", "keep")


def _second_reader(spec: str) -> tuple[str, float] | None:
    """The second reader's model set and confidence limit of a variant (`second_reader=SET@T`)."""
    for option in spec.split("+")[1:]:
        key, _, value = option.partition("=")
        if key == "second_reader":
            models, _, limit = value.partition("@")
            return models, float(limit) if limit else CascadeConfig().min_confidence
    return None


def variant_cascade_config(spec: str) -> CascadeConfig | None:
    """The line cascade a variant's `second_reader` asks for; None when it names none."""
    second = _second_reader(spec)
    if second is None:
        return None
    options = dict(option.partition("=")[::2] for option in spec.split("+")[1:])
    return CascadeConfig.model_validate(
        {
            "mode": "below_threshold",
            "unit": "lines",
            "min_confidence": second[1],
            "reader": "onnx_reader",
            "keep": options.get("keep", "second"),
        }
    )


def variant_engine_config(base: EngineConfig, spec: str) -> EngineConfig:
    """The engine config with a variant's precision and options, e.g. `rec=int8+threads=1`."""
    precision_part, *options = spec.split("+")
    options = [
        option
        for option in options
        if option.partition("=")[0] not in (*RasterizeConfig.model_fields, *_CASCADE_OPTIONS)
    ]
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
        updates[field_name] = _option_value(value)
    # Only the keys the base config set itself, so that the keys a preset fills stay the preset's.
    merged = {**base.ppocr_onnx.model_dump(exclude_unset=True), **updates}
    engine: dict[str, Any] = {"ppocr_onnx": PpocrOnnxConfig.model_validate(merged)}
    second = _second_reader(spec)
    if second is not None:
        engine["onnx_reader"] = OnnxReaderConfig.model_validate({"models": second[0]})
    return base.model_copy(update=engine)
