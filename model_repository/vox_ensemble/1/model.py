"""The streaming router; the code lives in backend_python.triton.router_model."""
from backend_python.triton.router_model import RouterModel as TritonPythonModel  # noqa: F401
