"""The LM lane; the code lives in backend_python.triton.lm_model."""
from backend_python.triton.lm_model import LMModel


class TritonPythonModel(LMModel):
    """Defined here, not imported under this name (see vox_ensemble/1/model.py)."""
