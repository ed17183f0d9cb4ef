"""CSM-1B (Sesame): our own backbone + depth decoder (`CsmLM`) and transformers' Mimi as the codec (`MimiCodec`)."""
from .codec import MimiCodec
from .config import CsmConfig, DepthDecoderConfig, LlamaShape, RopeConfig
from .lm import CsmLM
from .presets import PRESETS, preset_config

__all__ = ["CsmConfig", "CsmLM", "DepthDecoderConfig", "LlamaShape", "MimiCodec", "PRESETS", "RopeConfig",
           "preset_config"]
