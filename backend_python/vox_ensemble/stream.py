"""One admitted stream as the router's threads see it, and one decoded chunk ready to send."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

from audio.stream import AudioPiece, StreamAudio
from backend_python.stub_common.reference_inputs import ReferenceAudio
from backend_python.stub_common.request_inputs import SpeechRequest
from protocol.tensors import SPEECH_REQUEST
from scheduler import Lane, LMStamps, RouteReason


@dataclass(frozen=True)
class Job:
    """One admitted request (copies, never the request object)."""

    stream_id: str  # the LM request's id: the cancel control request names it
    inputs: list  # the LM request's tensors: the parsed request, a registered voice's, the flow bound
    sender: object  # the request's response sender
    arrival: float  # time.monotonic() when execute saw it
    codec_parameters: dict  # BLS parameters of its codec calls (the test-only fault tag, or empty)
    audio: StreamAudio  # its chunks resampled and encoded as the client asked (`audio_format`, `sample_rate`)
    client_id: str | None = None  # the client's request id when it acks chunks (`client_acks`): acks name it
    session_id: object = None  # the sequence id of a streaming-text session: its pieces name it
    reference: "PendingReference | None" = None  # a voice to clone: encoded (voice_encoder) before the LM request
    audio_in: "InputChunker | None" = None  # an audio-in session's input, cut for the encoder (audio_sessions.py)
    request_id: str = ""  # the client's request id (the gateway's `x-request-id`), for the log: "" when it gave none

    @property
    def acks(self) -> bool:
        return self.client_id is not None


class PendingReference:
    """A stream's reference audio until the encoder lane has taken it: up to 60 s of audio (11 MB at 48 kHz)
    is not kept for the rest of the stream's life."""

    def __init__(self, reference: ReferenceAudio) -> None:
        self._reference: ReferenceAudio | None = reference

    def take(self) -> ReferenceAudio:
        reference, self._reference = self._reference, None
        if reference is None:
            raise RuntimeError("a stream's reference audio was taken twice")
        return reference


@dataclass(frozen=True)
class DecodedChunk:
    """A decoded chunk, ready to send."""

    index: int
    lane: Lane
    audio: np.ndarray  # [n] float32, at the codec's rate
    sample_rate: int
    is_last: bool = False  # the LM marked it its stream's last chunk
    reason: RouteReason | None = None  # why the routing rule chose `lane` (metrics)
    words: bytes | None = None  # UTF-8 JSON `word_timestamps`, when the client asked for them
    speed: float = 1.0  # its listener plays `audio` this many times as fast (`speed`)
    # chunk 0: when the router received its codes and had its audio (time.monotonic()), and the LM's stamps
    # (scheduler.LMStamps) when it sent them: its first-audio phases (scheduler/first_audio.py)
    received_s: float | None = None
    decoded_s: float | None = None
    lm_stamps: LMStamps | None = None

    @property
    def duration_s(self) -> float:
        """Seconds its listener plays it for."""
        return self.audio.size / self.sample_rate / self.speed

    def tensors(self, piece: AudioPiece | None = None) -> list:
        """The response tensors (protocol.tensors.RESPONSE_OUTPUTS): the chunk as decoded, or as `piece`
        (resampled, encoded) says; `audio_bytes` only with an encoded piece."""
        piece = piece or AudioPiece(self.audio, None, self.sample_rate)
        tensors = [pb_utils.Tensor("audio", piece.audio),
                   pb_utils.Tensor("sample_rate", np.array([piece.sample_rate], dtype=np.int32)),
                   pb_utils.Tensor("chunk_index", np.array([self.index], dtype=np.int32)),
                   pb_utils.Tensor("lane", np.array([self.lane.value.encode()], dtype=np.bytes_))]
        if piece.data is not None:
            tensors.append(pb_utils.Tensor("audio_bytes", np.array([piece.data], dtype=np.object_)))
        if self.words is not None:
            tensors.append(pb_utils.Tensor("word_timestamps", np.array([self.words], dtype=np.object_)))
        return tensors


def as_numpy(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def typed_request(req: SpeechRequest):
    """The request as the router parsed it, the LM lane's `speech_request` input: parsed once, here."""
    return pb_utils.Tensor(SPEECH_REQUEST, np.array([req.to_json().encode("utf-8")], dtype=np.object_))
