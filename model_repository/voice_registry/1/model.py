"""The voice registry; the code lives in backend_python.voice_registry.model."""
from backend_python.voice_registry.model import VoiceRegistryModel


class TritonPythonModel(VoiceRegistryModel):
    """Defined here, not imported under this name (see vox_ensemble/1/model.py)."""
