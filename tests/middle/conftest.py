"""The middle test layer: the Triton models run in-process on a fake `triton_python_backend_utils`.

The `pb` fixture installs the fake (fake_pb_utils.py) into `sys.modules` before any Triton model
module is imported; `lanes` builds a router (RouterModel, initialised as Triton would) whose BLS
calls reach fake codec lanes and the real LM glue (LMModel) over a fake engine, and the real
chunk channel between them. No tritonserver runs.
"""
from __future__ import annotations

import json
import queue
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from backend_python.engine.config import EngineConfig
from protocol.tensors import SPEECH_REQUEST
from tests.middle import fake_pb_utils

SAMPLES_PER_FRAME = 1920
SAMPLE_RATE = 24000
STUB_DIED = "Stub process '{model}_0_0' is not healthy."  # what Triton 2.51 answers for a dead stub
HEAL_PARAMETERS = {"lane_reload_delay_s": "0.01", "lane_unload_wait_s": "2", "lane_reload_attempts": "3"}


@pytest.fixture(scope="session")
def pb():
    saved = sys.modules.get("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = fake_pb_utils
    yield fake_pb_utils
    if saved is None:
        sys.modules.pop("triton_python_backend_utils", None)
    else:
        sys.modules["triton_python_backend_utils"] = saved


class FakeEngine:
    """The LM engine's surface that the LM glue uses; the test plays its loop through each sequence's sink."""

    def __init__(self, max_queued: int = 4, max_seq_len: int = 4096) -> None:
        self.config = EngineConfig(max_queued=max_queued, max_seq_len=max_seq_len)
        self.is_accepting = True
        self.added: queue.Queue = queue.Queue()
        self.cancelled: list[str] = []
        self.texts: dict[str, list[tuple[str, bool]]] = {}  # streamed text pieces by request id, in order
        self.inputs: dict[str, list[tuple[np.ndarray, bool]]] = {}  # input frames ([N, K]) by request id, in order
        self._live: dict[str, object] = {}
        self._lock = threading.Lock()

    def try_add(self, seq) -> bool:
        if not self.is_accepting:
            return False
        with self._lock:
            self._live[seq.request_id] = seq
        self.added.put(seq)
        return True

    def cancel_id(self, request_id: str) -> None:
        from protocol.reasons import EndReason
        self.cancelled.append(request_id)
        self.finish(request_id, EndReason.CANCELLED)

    def add_text(self, request_id: str, text: str, is_final: bool) -> None:
        with self._lock:
            self.texts.setdefault(request_id, []).append((text, is_final))

    def add_input(self, request_id: str, frames, is_final: bool) -> None:
        with self._lock:
            self.inputs.setdefault(request_id, []).append((frames.numpy(), is_final))

    def finish(self, request_id: str, error) -> None:
        """End a live request as the engine would (once): None, EndReason.CANCELLED or an error string."""
        with self._lock:
            seq = self._live.pop(request_id, None)
        if seq is not None:
            seq.sink.finish(error)

    def next_sequence(self, timeout_s: float = 5.0):
        return self.added.get(timeout=timeout_s)

    def stop(self) -> None:
        pass


class FakeText:
    """A streaming text as a family would hold it: its pieces, joined."""

    is_segmented = False

    def __init__(self) -> None:
        self.text, self.is_closed, self.num_prompt_tokens = "", False, 4

    def append(self, text: str) -> None:
        self.text += text

    def close(self) -> None:
        self.is_closed = True

    def prompt(self):
        return SimpleNamespace(num_tokens=4, text=self) if self.text else None


class FakeSpeechLM:
    voices = ("tiny",)
    frame_rate = 12.5
    supports_streaming_text = True
    supports_reference = False  # a test that clones a voice sets it
    takes_input = False  # an audio-in test sets it (an interleaved family's)
    num_codebooks = 4
    # SpeechLM's prompt-option declarations (models/base.py): none taken, as most families
    languages: tuple[str, ...] = ()
    supports_instructions = supports_text_first = takes_prompt_options = False

    def __init__(self) -> None:
        self.references = []  # the VoiceReference (or None) of each prompt built
        self.forgotten = []  # the VoiceReference of each `forget_voice`

    def forget_voice(self, reference) -> int:
        self.forgotten.append(reference)
        return 0

    def open_text(self, voice: str | None) -> FakeText:
        return FakeText()

    def encode_prompt(self, text: str, voice: str | None, reference=None):
        if voice is not None and voice not in self.voices:
            raise ValueError(f"unknown voice {voice!r}; known voices: {list(self.voices)}")
        self.references.append(reference)
        return SimpleNamespace(num_tokens=len(text) + 4)

    def encode_segment(self, text: str, voice: str | None, context, reference=None):
        return self.encode_prompt(text, voice, reference)

    def open_input(self, reference):
        self.references.append(reference)
        return SimpleNamespace(num_tokens=4)

    def kv_positions_for(self, num_prompt_tokens: int, num_frames: int) -> int:
        """SpeechLM's count; an interleaved model's holds its input's frames too (models/tse/)."""
        return num_prompt_tokens + (2 if self.takes_input else 1) * num_frames + 1

    def codec_prefix(self, prompt):
        return None


def lm_glue(engine: FakeEngine):
    """The real LM glue over a fake engine and model (what `initialize` would load)."""
    from backend_python.speechlm_lm.model import LMModel
    from backend_python.stub_common.chunk_channel import ChannelClients
    from backend_python.stub_common.request_inputs import RequestLimits
    lm = LMModel.__new__(LMModel)
    lm.model, lm.engine, lm.codec, lm.device, lm.family = FakeSpeechLM(), engine, None, "cpu", "fake"
    lm.limits, lm.channels = RequestLimits(), ChannelClients()
    return lm


class FakeCodec:
    """A codec lane: silence of the right length, or Triton's answer once its stub has died."""

    def __init__(self, model: str) -> None:
        self.model, self.is_dead, self.calls = model, False, 0
        self.places = []  # (stream_id, start_frame, is_last) of each call that named its stream, else None
        self.signal = None  # samples -> audio [n] float32 (e.g. a tone); None: silence
        self.run_ms = 0.0  # the decode's run time the lane reports
        self.overlap_frames = 0  # a codec with lookahead returns this many frames past the new ones (at most)
        self.conditions = []  # each call's `condition` input, or None

    def __call__(self, request, decoupled: bool):
        pb = fake_pb_utils
        self.calls += 1
        if self.is_dead:
            return [pb.InferenceResponse(error=pb.TritonError(STUB_DIED.format(model=self.model)))]
        codes = pb.get_input_tensor_by_name(request, "codes").as_numpy()
        stream = pb.get_input_tensor_by_name(request, "stream_id")
        self.places.append(None if stream is None else (
            stream.as_numpy().reshape(-1)[0].decode(),
            int(pb.get_input_tensor_by_name(request, "start_frame").as_numpy().reshape(-1)[0]),
            bool(pb.get_input_tensor_by_name(request, "is_last").as_numpy().reshape(-1)[0])))
        context = int(pb.get_input_tensor_by_name(request, "context_frames").as_numpy().reshape(-1)[0])
        lookahead = pb.get_input_tensor_by_name(request, "lookahead_frames")
        lookahead = 0 if lookahead is None else int(lookahead.as_numpy().reshape(-1)[0])
        condition = pb.get_input_tensor_by_name(request, "condition")
        self.conditions.append(None if condition is None else condition.as_numpy().reshape(-1).copy())
        num_new = codes.shape[1] - context - lookahead
        num_samples = (num_new + min(self.overlap_frames, lookahead)) * SAMPLES_PER_FRAME
        audio = (np.zeros(num_samples, np.float32) if self.signal is None else self.signal(num_samples)).reshape(1, -1)
        return [pb.InferenceResponse(output_tensors=[
            pb.Tensor("audio", audio), pb.Tensor("sample_rate", np.array([[SAMPLE_RATE]], np.int32)),
            pb.Tensor("batch_size", np.array([[1]], np.int32)),
            pb.Tensor("run_ms", np.array([[self.run_ms]], np.float32))])]


class Lanes:
    """A router over fake lanes; `lm_is_dead` is what the router's LM watch finds."""

    def __init__(self, pb, mode: str, scheduler: dict[str, str] | None = None) -> None:
        from backend_python.vox_ensemble import model as router_model
        pb.SERVER.reset()
        self.pb, self.engine = pb, FakeEngine()
        self.lm = lm_glue(self.engine)
        self.codecs = {name: FakeCodec(name) for name in ("codec", "codec_urgent")}
        pb.SERVER.handlers.update(self.codecs)
        pb.SERVER.handlers["speechlm_lm"] = self._call_lm
        pb.SERVER.on_load = self._fresh_stub
        self.lm_is_dead = False
        self.lm_input_names: list[list[str]] = []  # the input names of each request the LM got
        self.lm_requests: list[dict] = []  # the parsed request (`speech_request`) each stream's LM request carried
        lanes = self

        class StubWatch:
            def __init__(self, model: str) -> None:
                self.model = model

            def is_dead(self) -> bool:
                return not lanes._has_live_stub(self.model)
        saved = router_model.StubWatch, router_model.stub_is_running
        router_model.StubWatch, router_model.stub_is_running = StubWatch, self._has_live_stub
        parameters = {"mode": mode, **HEAL_PARAMETERS, **(scheduler or {})}
        try:
            self.router = router_model.RouterModel()
            self.router.initialize({"model_config": json.dumps(
                {"parameters": {key: {"string_value": value} for key, value in parameters.items()}})})
        finally:
            router_model.StubWatch, router_model.stub_is_running = saved

    def _fresh_stub(self, model: str) -> None:
        """A load starts the model's stub afresh."""
        if model in self.codecs:
            self.codecs[model].is_dead = False
        else:
            self.lm_is_dead = False

    def _has_live_stub(self, model: str) -> bool:
        return not (self.codecs[model].is_dead if model in self.codecs else self.lm_is_dead)

    def _call_lm(self, request, decoupled: bool):
        self.lm_input_names.append([t.name() for t in request.inputs()])
        typed = self.pb.get_input_tensor_by_name(request, SPEECH_REQUEST)
        if typed is not None:
            self.lm_requests.append(json.loads(bytes(typed.as_numpy().reshape(-1)[0])))
        self.lm.execute([request])
        return request.sender.responses

    def speak(self, text: str | bytes = "Hello there.", session=0, flags: int = 0, **inputs):
        """Send one client request to the router; its fake request (whose sender records the stream).
        `session` and `flags`: a streaming-text session's sequence id and sequence start/end flags."""
        data = text.encode() if isinstance(text, str) else text
        tensors = [] if text is None else [self.pb.Tensor("text", np.array([data], dtype=np.object_))]
        tensors += [self.pb.Tensor(name, value if isinstance(value, np.ndarray)  # `ref_audio`: [n] as it is
                                   else np.array([value.encode() if isinstance(value, str) else value]))
                    for name, value in inputs.items()]
        request = self.pb.Request(tensors, correlation_id=session, flags=flags)
        self.router.execute([request])
        return request

    def close(self) -> None:
        self.router.finalize()
        self.lm.channels.close()


@pytest.fixture
def lanes(pb, request):
    param = getattr(request, "param", "voxlane")  # a mode, or a dict of router parameters with its "mode"
    settings = {"mode": param} if isinstance(param, str) else dict(param)
    built = Lanes(pb, settings.pop("mode"), settings)
    yield built
    built.close()


def chunk(index: int, new_frames: int = 2, context_frames: int = 0, num_codebooks: int = 4, start_frame: int = 0,
          is_last: bool = False, lookahead_frames: int = 0, overlap_frames: int = 0, condition=None):
    import torch

    from backend_python.engine.sequence import Chunk
    num_frames = context_frames + new_frames + lookahead_frames
    return Chunk(index, torch.zeros(num_frames, num_codebooks, dtype=torch.int64), context_frames,
                 start_frame=start_frame, is_last=is_last, lookahead_frames=lookahead_frames,
                 overlap_frames=overlap_frames, condition=condition)
