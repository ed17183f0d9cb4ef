"""The streaming router; the code lives in backend_python.vox_ensemble.model."""
from backend_python.vox_ensemble.model import RouterModel


class TritonPythonModel(RouterModel):
    """Defined here, not imported under this name: with the Python 3.12 stub an imported
    alias made the decoupled stub unhealthy after its first stream."""
