"""FlashTTS (ASLP-lab): CosyVoice 2's speech-token LM with multi-token-prediction heads, an X-prediction mean-flow
DiT from tokens to mel in 1 or 2 evaluations, and a HiFi-GAN at 24 kHz."""
from .codec import FlashTTSCodec
from .codec_config import FlashTTSCodecConfig

__all__ = ["FlashTTSCodec", "FlashTTSCodecConfig"]
