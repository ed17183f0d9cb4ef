"""Orpheus (Llama-3B + SNAC 24 kHz): our Llama backbone (`OrpheusLM`, 7-token frames) and SNAC codec."""
from ..lazy_exports import lazy_exports

_EXPORTS = {"SnacCodec": "codec", "SnacConfig": "codec", "OrpheusConfig": "config", "OrpheusLM": "lm",
            "PRESETS": "presets", "preset_config": "presets", "build_tiny_checkpoint": "tiny"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
