"""PP-OCRv5 on onnxruntime: detection, text-line orientation and recognition from verified files."""

from appliance.engines.ppocr_onnx.engine import PpocrOnnxEngine, default_model_dir

__all__ = ["PpocrOnnxEngine", "default_model_dir"]
