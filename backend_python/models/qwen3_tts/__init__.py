"""Qwen3-TTS (12 Hz): our own talker + code predictor (`Qwen3TTSLM`) and codec (`codec.py`)."""
from ..lazy_exports import lazy_exports

_EXPORTS = {"CodePredictorConfig": "config", "Qwen3TTSConfig": "config", "TalkerConfig": "config",
            "Qwen3TTSLM": "lm", "PRESETS": "presets", "preset_config": "presets", "build_tiny_checkpoint": "tiny"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
