"""The voice encoder lane; the code lives in backend_python.voice_encoder.model."""
from backend_python.voice_encoder.model import VoiceEncoderModel


class TritonPythonModel(VoiceEncoderModel):
    """Defined here, not imported under this name (see vox_ensemble/1/model.py)."""
