"""VoxLane's wire protocol, shared by the server (`backend_python/`) and the clients (`clients/`).

Torch-free and Triton-free (numpy only), so every process can import it:

| module | what |
| --- | --- |
| `models.py` | the Triton model names |
| `tensors.py` | the request and response tensors of `vox_ensemble`: name, dtype, shape, default, limits |
| `limits.py` | `RequestLimits`: a request's text length and audio seconds, beyond its tensors' ranges |
| `settings.py` | `read_settings`: a frozen settings dataclass from config.pbtxt parameters or JSON, by field type |
| `reasons.py` | `EndReason`, why a stream ended, and `Ended`, an ending as a value |
| `wire.py` | how an `Ended` travels inside a Triton error message (one encoder, one parser) |
| `channel.py` | the kinds of message on the router's chunk channel |
| `chunks.py` | chunk sizes as the LM's config parameters carry them, and the frames each chunk covers |
"""
from protocol.channel import ChannelKind
from protocol.models import CODEC, CODEC_URGENT, LANE_MODELS, LM, ROUTER, VOICE_ENCODER
from protocol.reasons import Ended, EndReason
from protocol.wire import decode_error, encode_error

__all__ = ["CODEC", "CODEC_URGENT", "LANE_MODELS", "LM", "ROUTER", "VOICE_ENCODER", "ChannelKind", "EndReason",
           "Ended", "decode_error", "encode_error"]
