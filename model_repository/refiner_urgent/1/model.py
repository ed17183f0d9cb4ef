"""A refinement lane; the code lives in backend_python.refiner.model."""
from backend_python.refiner.model import RefinerModel


class TritonPythonModel(RefinerModel):
    """Defined here, not imported under this name (see vox_ensemble/1/model.py)."""
