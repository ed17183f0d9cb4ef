"""The LM lane; the code lives in backend_python.speechlm_lm.model."""
from backend_python.speechlm_lm.model import LMModel


class TritonPythonModel(LMModel):
    """Defined here, not imported under this name (see vox_ensemble/1/model.py)."""
