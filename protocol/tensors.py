"""The tensors of `vox_ensemble` (its inputs but the output options and the reference audio reach
`speechlm_lm` too): one table, read by the server's request parser and by every client that builds a request.

Every input but `ref_audio` and the scalar outputs have shape [1]. A limit of None is not fixed here: the
`max_audio_seconds` default and ceiling are model parameters (`RequestLimits` reads them), and so are the
reference audio's (`ReferenceLimits`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    name: str
    triton_type: str  # Triton's datatype name
    dtype: type  # the numpy dtype of its array
    shape: tuple[int, ...] = (1,)
    default: object = None  # the value an absent optional input means (None: no default / decided elsewhere)
    low: float | None = None  # inclusive bounds of a numeric input
    high: float | None = None
    is_required: bool = False
    is_output_option: bool = False  # how the audio is sent back: the router applies it, the LM never sees it
    # a voice to clone: the router checks it and calls `voice_encoder`; the LM gets only what the encoder made
    # of it and, for in-context cloning, `ref_text` (REFERENCE_LM_INPUTS)
    is_reference: bool = False
    # streamed input audio (an interleaved model's: AUDIO-IN sessions): the router checks it, has
    # `voice_encoder` code it and hands the LM only the codes (INPUT_CODES)
    is_input_audio: bool = False

    @property
    def json_type(self) -> type:
        """The JSON type a client's field for this input takes (bool, int or float; str for BYTES)."""
        if np.issubdtype(self.dtype, np.bool_):
            return bool
        if np.issubdtype(self.dtype, np.integer):
            return int
        return float if np.issubdtype(self.dtype, np.floating) else str

    def bound_at_dtype(self, bound: float) -> float:
        """A documented bound as the input's dtype holds it: FP32 1e-6 arrives as 9.99999997e-07, and is in range."""
        return float(np.array(bound, dtype=self.dtype)) if np.issubdtype(self.dtype, np.floating) else bound


TIMESTAMPS_NONE, TIMESTAMPS_WORD = "none", "word"  # the values of `timestamps`
TIMESTAMP_KINDS = (TIMESTAMPS_NONE, TIMESTAMPS_WORD)
REQUEST_INPUTS: dict[str, TensorSpec] = {spec.name: spec for spec in (
    TensorSpec("text", "BYTES", np.object_, is_required=True),  # UTF-8; length limit: RequestLimits
    TensorSpec("voice", "BYTES", np.object_),  # default: the model's first voice
    # the sampling settings: SamplingParams (backend_python/models/base.py) reads these defaults and ranges
    TensorSpec("temperature", "FP32", np.float32, default=0.9, low=0.0, high=10.0),  # 0 is greedy
    TensorSpec("top_p", "FP32", np.float32, default=1.0, low=1e-6, high=1.0),
    TensorSpec("top_k", "INT32", np.int32, default=50, low=0, high=100_000),  # 0 disables
    TensorSpec("repetition_penalty", "FP32", np.float32, default=1.05, low=1e-3, high=10.0),
    TensorSpec("seed", "INT64", np.int64),  # default: a random seed
    TensorSpec("max_audio_seconds", "FP32", np.float32, low=1e-3),  # default and ceiling: RequestLimits
    TensorSpec("ignore_eos", "BOOL", np.bool_, default=False),
    # how the prompt is built (issue 33; the family's SpeechLM declares which it takes: models/base.py
    # PromptOptions): `language` a name of the model's (case-insensitive) or "auto" (default: the model's),
    # `instructions` a style or emotion text, `non_streaming_mode` true: the whole text in the prefill
    TensorSpec("language", "BYTES", np.object_),
    TensorSpec("instructions", "BYTES", np.object_),
    TensorSpec("non_streaming_mode", "BOOL", np.bool_, default=False),
    # "word": each chunk's response carries the words it speaks with their start and end in the stream's audio
    # time (RESPONSE_OUTPUTS' `word_timestamps`, approximate: backend_python/engine/word_clock.py); "none": not
    TensorSpec("timestamps", "BYTES", np.object_, default=TIMESTAMPS_NONE),
    # true: the client acks each chunk it has taken (CONTROL_INPUTS' `ack_chunk`, same request id, same
    # stream) and the server bounds what is sent but not acked; false: the bound runs on real-time
    # playback from the first chunk (Triton tells a backend nothing of what its client has read)
    TensorSpec("client_acks", "BOOL", np.bool_, default=False),
    # a streaming-text session's bound on the wait for its next piece: default and ceiling RequestLimits
    TensorSpec("text_idle_timeout_s", "FP32", np.float32, low=1e-3),
    # the allowed values: protocol.formats (SAMPLE_RATES, TRITON_FORMATS)
    TensorSpec("sample_rate", "INT32", np.int32, is_output_option=True),  # default: the model's rate
    TensorSpec("audio_format", "BYTES", np.object_, default="pcm_f32", is_output_option=True),
    # the audio's tempo, its pitch kept (FFmpeg's atempo, chunk by chunk: audio/tempo.py); 2.0 is
    # twice as fast. Word timestamps are scaled with it
    TensorSpec("speed", "FP32", np.float32, default=1.0, low=0.25, high=4.0, is_output_option=True),
    # a voice to clone (issue 17): mono PCM in [-1, 1] at `ref_sample_rate`, which the server resamples (soxr) to
    # its voice encoder's rate; its length and level limits: ReferenceLimits
    TensorSpec("ref_audio", "FP32", np.float32, shape=(-1,), is_reference=True),
    TensorSpec("ref_sample_rate", "INT32", np.int32, low=8000, high=48000, is_reference=True),
    TensorSpec("ref_text", "BYTES", np.object_, is_reference=True),  # its transcript: in-context cloning needs it
    TensorSpec("x_vector_only", "BOOL", np.bool_, default=False, is_reference=True),  # the speaker embedding only
    # streamed input audio (issue 36): on a session's first request `input_sample_rate` opens an audio-in session
    # (its pieces' rate, a multiple of 25 Hz), and every request of it may carry a piece of `input_audio`, mono PCM
    # in [-1, 1] at that rate; its limits: AudioInLimits (backend_python/vox_ensemble/audio_sessions.py)
    TensorSpec("input_audio", "FP32", np.float32, shape=(-1,), is_input_audio=True),
    TensorSpec("input_sample_rate", "INT32", np.int32, low=8000, high=48000, is_input_audio=True),
)}
INPUT_NAMES = tuple(REQUEST_INPUTS)
OPTIONAL_INPUTS = tuple(name for name, spec in REQUEST_INPUTS.items() if not spec.is_required)
LM_INPUT_NAMES = tuple(name for name, spec in REQUEST_INPUTS.items()
                       if not spec.is_output_option and not spec.is_reference and not spec.is_input_audio)
SCALAR_INPUTS = tuple(name for name, spec in REQUEST_INPUTS.items()
                      if spec.triton_type != "BYTES" and spec.shape == (1,))
REFERENCE_INPUTS = tuple(name for name, spec in REQUEST_INPUTS.items() if spec.is_reference)  # on a session's first

# What `voice_encoder` answers and `speechlm_lm` takes beside `ref_text`: the names a family's
# `VoiceEncoder.reference_tensors` may use (both configs declare them; the lane checks its family's at load).
# shape: without the encoder's batch dimension; a name may be absent (x-vector only: no `ref_codes`).
REFERENCE_TENSORS: dict[str, TensorSpec] = {spec.name: spec for spec in (
    TensorSpec("speaker_embedding", "FP32", np.float32, shape=(-1,)),  # [D]
    TensorSpec("ref_codes", "INT64", np.int64, shape=(-1, -1)),  # [frames, K]: the reference audio as codec codes
)}
REFERENCE_LM_INPUTS = ("ref_text", *REFERENCE_TENSORS)  # `ref_text` only for in-context cloning

# A control request on a speech request's stream: not a speech request (no `text`), no response.
CONTROL_INPUTS: dict[str, TensorSpec] = {spec.name: spec for spec in (
    # the client has taken every chunk up to this index of the stream whose request id it carries
    TensorSpec("ack_chunk", "INT32", np.int32, low=0),
)}

# Internal inputs of `speechlm_lm` that the router sets (scheduler/flow.py): on a stream's request, the
# bound on audio emitted but not taken (FP32 seconds; absent: unbounded); alone on a control request
# naming a live stream's id, the frames its client has taken (INT32).
MAX_UNREAD_AUDIO_S = "max_unread_audio_s"
TAKEN_FRAMES = "taken_frames"
CANCEL = "cancel"  # BOOL true alone on a control request naming a live stream's id: that stream ends
# On a stream's request, the router's parsed request (BYTES, JSON: stub_common/request_inputs.py SpeechRequest):
# the LM lane takes it in place of the client's inputs, so a request is parsed once, by the router.
SPEECH_REQUEST = "speech_request"
# On a stream's request with `speed` other than 1 (FP32): its listener plays the model's audio this many times
# as fast, so a playback-paced bound (no acks) lets the LM run ahead at that rate.
PLAYBACK_SPEED = "playback_speed"

# Streaming text (a session: see SEQUENCE_START). On a stream's first request, `text_open` BOOL = true:
# its `text` is the text's start and more follows. On a control request naming a live stream's id,
# `text_piece` BYTES (UTF-8, whole characters, may be empty) is more text, and `text_final` BOOL = true
# closes the text.
TEXT_OPEN = "text_open"
TEXT_PIECE = "text_piece"
TEXT_FINAL = "text_final"
# Streamed input audio (an audio-in session): on a control request naming a live stream's id, `input_codes`
# INT32 [N, K] are its next input frames as the voice encoder coded them (N may be 0), and `input_final`
# BOOL = true closes its input.
INPUT_CODES = "input_codes"
INPUT_FINAL = "input_final"
# The model's preset voices (the voice listing: `voice_registry`'s `list` asks the LM lane once): a control request
# of `list_voices` BOOL = true alone; its one response carries `voices` BYTES [1], the JSON list of the names.
LIST_VOICES = "list_voices"
VOICES_OUTPUT = "voices"
# A registered voice was deleted (`voice_registry`'s `delete` tells the LM lane): a control request of `forget_voice`
# BOOL = true with the voice's reference tensors (REFERENCE_LM_INPUTS); the LM drops what it cached of that voice.
FORGET_VOICE = "forget_voice"
# The LM lane's inputs beside the client's (LM_INPUT_NAMES) and a voice's (REFERENCE_LM_INPUTS): the router's, named
# above; `speechlm_lm`'s config.pbtxt declares them between the two, in this order.
LM_INTERNAL_INPUTS: dict[str, TensorSpec] = {spec.name: spec for spec in (
    TensorSpec(SPEECH_REQUEST, "BYTES", np.object_),
    TensorSpec(MAX_UNREAD_AUDIO_S, "FP32", np.float32),
    TensorSpec(PLAYBACK_SPEED, "FP32", np.float32),
    TensorSpec(CANCEL, "BOOL", np.bool_),
    TensorSpec(TAKEN_FRAMES, "INT32", np.int32),
    TensorSpec(TEXT_OPEN, "BOOL", np.bool_),
    TensorSpec(TEXT_PIECE, "BYTES", np.object_),
    TensorSpec(TEXT_FINAL, "BOOL", np.bool_),
    TensorSpec(INPUT_CODES, "INT32", np.int32, shape=(-1, -1)),  # [N, K]
    TensorSpec(INPUT_FINAL, "BOOL", np.bool_),
    TensorSpec(LIST_VOICES, "BOOL", np.bool_),
    TensorSpec(FORGET_VOICE, "BOOL", np.bool_),
)}
# The BLS request parameter (true) on the router's call to `voice_encoder` for a chunk of a stream's input
# audio: the lane codes it whole (`ref_codes`), without a reference's length and level checks.
INPUT_CHUNK_PARAMETER = "input_chunk"
# The BLS request parameter (true) on `voice_registry`'s call to `voice_encoder` for what the served model's voices
# hold: the lane answers `VOICE_SPEC` BYTES [1], protocol.voices.VoiceSpec as JSON (its reference inputs ignored)
VOICE_SPEC = "voice_spec"

# A streaming-text session on `vox_ensemble` is a Triton sequence: its requests share a `sequence_id`,
# the first has the sequence-start flag (and carries the voice and sampling inputs), later ones carry only
# `text` pieces, the last has the sequence-end flag. Triton's request flags (tritonserver.h):
SEQUENCE_START = 1  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
SEQUENCE_END = 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
# The `code` of an error that answers one piece of a session: that piece is refused and changes nothing;
# the session's stream goes on. Any other error ends the stream.
PIECE_ERROR_CODES = ("bad_piece", "unknown_session", "session_closed", "session_ended")
# An audio-in session is one too (`input_sample_rate` on its first request): its later requests carry only
# `input_audio` pieces (and, if given, the same `input_sample_rate`), refused with the same codes.

RESPONSE_OUTPUTS: dict[str, TensorSpec] = {spec.name: spec for spec in (
    TensorSpec("audio", "FP32", np.float32, shape=(-1,)),  # mono PCM in [-1, 1]; [0] with an encoded format
    TensorSpec("audio_bytes", "BYTES", np.object_),  # the chunk's encoded bytes; only with an encoded format
    TensorSpec("sample_rate", "INT32", np.int32),  # the rate of the audio sent
    TensorSpec("chunk_index", "INT32", np.int32),  # 0, 1, 2, ... in order
    TensorSpec("lane", "BYTES", np.object_),  # "urgent", "background" or "inline"
    # with `timestamps` "word" only: UTF-8 JSON, the words this chunk speaks, each once, in order:
    # [{"word": "Hello,", "start": 0.0, "end": 0.429}, ...], seconds of the stream's audio as sent (after `speed`)
    TensorSpec("word_timestamps", "BYTES", np.object_),
)}


def scalar_array(name: str, value: object) -> np.ndarray:
    """A request input's value as its [1] array (BYTES from str or bytes); `ref_audio`'s as its [n] array."""
    spec = REQUEST_INPUTS[name]
    if spec.shape != (1,):
        return np.ascontiguousarray(value, dtype=spec.dtype).reshape(-1)
    if spec.triton_type == "BYTES":
        return np.array([value.encode("utf-8") if isinstance(value, str) else value], dtype=np.object_)
    if np.issubdtype(spec.dtype, np.integer) and not fits_integer(name, value):  # numpy would wrap it
        raise ValueError(f"input '{name}' must fit {spec.triton_type}, got {value!r}")
    return np.array([value], dtype=spec.dtype)


def fits_integer(name: str, value: int) -> bool:
    """Whether `value` fits the integer input `name`'s dtype (a value outside it is an error, never a wrap)."""
    info = np.iinfo(REQUEST_INPUTS[name].dtype)
    return info.min <= int(value) <= info.max
