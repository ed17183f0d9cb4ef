"""FlashTTS (ASLP-lab): CosyVoice 2's speech-token LM with multi-token-prediction heads, an X-prediction mean-flow
DiT from tokens to mel in 1 or 2 evaluations, and a HiFi-GAN at 24 kHz."""
from ..lazy_exports import lazy_exports

_EXPORTS = {"FlashTTSCodec": "codec", "FlashTTSCodecConfig": "codec_config"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
