"""The LM lane; the code lives in backend_python.triton.lm_model."""
from backend_python.triton.lm_model import LMModel as TritonPythonModel  # noqa: F401
