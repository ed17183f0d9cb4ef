"""Orpheus (Llama-3B + SNAC 24 kHz): our Llama backbone (`OrpheusLM`, 7-token frames) and SNAC codec."""
from .codec import SnacCodec, SnacConfig
from .config import OrpheusConfig
from .lm import OrpheusLM
from .presets import PRESETS, preset_config
from .tiny import build_tiny_checkpoint

__all__ = ["OrpheusConfig", "OrpheusLM", "PRESETS", "SnacCodec", "SnacConfig", "build_tiny_checkpoint",
           "preset_config"]
