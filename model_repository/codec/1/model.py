"""A codec lane; the code lives in backend_python.codec.model."""
from backend_python.codec.model import CodecModel


class TritonPythonModel(CodecModel):
    """Defined here, not imported under this name (see vox_ensemble/1/model.py)."""
