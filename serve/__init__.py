"""ONNX export, torch-free runtime predictor, batch scoring, benchmarks. No torch import at run time."""
