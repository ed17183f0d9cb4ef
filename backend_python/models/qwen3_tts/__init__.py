"""Qwen3-TTS (12 Hz): our own talker + code predictor (`Qwen3TTSLM`) and codec (`codec.py`)."""
from .config import CodePredictorConfig, Qwen3TTSConfig, TalkerConfig
from .lm import Qwen3TTSLM
from .presets import PRESETS, preset_config
from .tiny import build_tiny_checkpoint

__all__ = ["CodePredictorConfig", "PRESETS", "Qwen3TTSConfig", "Qwen3TTSLM", "TalkerConfig",
           "build_tiny_checkpoint", "preset_config"]
