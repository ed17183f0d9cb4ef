"""CSM-1B (Sesame): our own backbone + depth decoder (`CsmLM`) and transformers' Mimi as the codec (`MimiCodec`)."""
from ..lazy_exports import lazy_exports

_EXPORTS = {"MimiCodec": "codec", "CsmConfig": "config", "DepthDecoderConfig": "config", "LlamaShape": "config",
            "RopeConfig": "config", "CsmLM": "lm", "PRESETS": "presets", "preset_config": "presets"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
