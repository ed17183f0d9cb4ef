"""The codec lane; the code lives in backend_python.triton.codec_model."""
from backend_python.triton.codec_model import CodecModel as TritonPythonModel  # noqa: F401
